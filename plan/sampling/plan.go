// Package sampling decides what the exporter samples and how often: which
// precise memory events this host's PMUs offer (Intel PEBS load latency and
// stores, AMD IBS op, Arm SPE loads and stores), their perf_event
// attributes, and the governor that raises sampling periods when samples
// cost more than a budget. It is pure: PMU descriptions in, attributes and
// periods out; kernel/perfsample opens and reads them.
package sampling

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// SampleType is what every sampling event records: the event's id first so
// events can share a CPU's buffer, who and where, the data address, the
// period the governor set, and the memory fields (absent ones are zero).
const SampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID |
	unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD |
	unix.PERF_SAMPLE_DATA_SRC

// Memory says what a memory event's samples carry beyond SampleType.
const (
	// WeightStruct carries PEBS' load latency (and, since Alder Lake, the
	// instruction latency); Linux 5.12.
	WeightStruct = unix.PERF_SAMPLE_WEIGHT_STRUCT
	// Cgroup carries the sampled task's cgroup id, for per-cgroup series;
	// Linux 5.7.
	Cgroup = unix.PERF_SAMPLE_CGROUP
)

// Config is one event to sample on every CPU it lists.
type Config struct {
	Name string // label: mem-loads, mem-stores, ibs_op, or the user's spec
	PMU  string
	Attr eventspec.Attr
	// Leader, when set, must be opened first, counting, as the sampling
	// event's group leader (Sapphire Rapids' mem-loads-aux).
	Leader     *eventspec.Attr
	SampleType uint64
	Period     uint64
	CPUs       []int // nil: every online CPU
	// AddrOnly keeps only samples with a data address: IBS op samples every
	// kind of op, and only loads and stores have one.
	AddrOnly bool
	// Memory is whether the samples describe loads and stores (data_src).
	Memory bool
	// PeriodAlign, when set, is what every period must be a multiple of
	// (IBS: 16; the kernel refuses others).
	PeriodAlign uint64
	// RegsUser is sample_regs_user; Decode says the samples are resolved to
	// accesses by decoding the instruction at their IP (the address sampler
	// without a precise PMU).
	RegsUser uint64
	Decode   bool
	// IPAfter: the sample's IP is the instruction after the access (PEBS
	// at precise_ip 1), not the accessing one.
	IPAfter bool
	// Aux: the event writes its samples into an AUX area (Arm SPE), which
	// its own ring maps; its data area carries the AUX records and the
	// context switches (SampleType is then what those records carry).
	Aux bool
}

// Samplers by name (the sampling families' sampler label): the address
// sampler's timer samples, resolved from their registers, or the memory
// sampler's precise events (and any the user names).
const (
	SamplerAddress = "address"
	SamplerMemory  = "memory"
)

// Sampler names the sampler a config belongs to.
func (c Config) Sampler() string {
	if c.Decode && !c.Memory {
		return SamplerAddress
	}
	return SamplerMemory
}

// Source names where a config's accesses come from, as the comm
// collector's source label does: decode (timer samples resolved from
// their registers), pebs, ibs or spe (precise memory samples); "" for an
// event that samples no accesses.
func (c Config) Source() string {
	switch {
	case c.Decode && !c.Memory:
		return "decode"
	case !c.Memory:
		return ""
	case strings.HasPrefix(c.PMU, "ibs"):
		return "ibs"
	case strings.HasPrefix(c.PMU, "arm_spe"):
		return "spe"
	}
	return "pebs"
}

// Precise is the host's precise memory sampling (Plan's PEBS, IBS or SPE
// configs, without the user's events) for the address sampler: their
// samples go to its decoder, which adds the access width from the
// instruction at their IP. None where the host has none.
func Precise(pmus []*pmu.PMU, o Options) ([]Config, error) {
	o.Events = nil
	cfgs, _, err := Plan(pmus, o)
	if err != nil {
		return nil, err
	}
	for i := range cfgs {
		cfgs[i].Decode = true
	}
	return cfgs, nil
}

// DecodeSampleType is what the address sampler records: who, where and
// when, and the user registers to evaluate the sampled instruction's
// operand with (cpu-clock's fixed period stands for the time).
const DecodeSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID |
	unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_REGS_USER

// PeriodIsTime says whether the period counts nanoseconds (the software
// clocks, cpu-clock and task-clock) rather than events.
func (c Config) PeriodIsTime() bool {
	return c.Attr.Type == unix.PERF_TYPE_SOFTWARE &&
		(c.Attr.Config == unix.PERF_COUNT_SW_CPU_CLOCK || c.Attr.Config == unix.PERF_COUNT_SW_TASK_CLOCK)
}

// Decoded is the address sampler: cpu-clock in user mode every period ns on
// every CPU, with the user registers of regs (memop.RegsMask).
func Decoded(period uint64, cgroup bool, regs uint64) Config {
	st := uint64(DecodeSampleType)
	if cgroup {
		st |= Cgroup
	}
	return Config{Name: "cpu-clock", PMU: "software", Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, ExcludeKernel: true},
		SampleType: st, Period: period, RegsUser: regs, Decode: true}
}

// Align rounds a period up to what the event accepts.
func (c Config) Align(period uint64) uint64 {
	if a := c.PeriodAlign; a > 1 {
		return (period + a - 1) / a * a
	}
	return period
}

// Options are the user's choices.
type Options struct {
	Period uint64 // initial sampling period of memory events
	LdLat  uint64 // load latency threshold in cycles (Intel)
	Cgroup bool   // record cgroup ids
	Events []string
	// NoSPE leaves Arm SPE alone, and Why says why (Missing's reason):
	// SPE admits one event per CPU, system-wide (the kernel's
	// PERF_PMU_CAP_EXCLUSIVE), so whoever holds it keeps every other tool
	// and collector from it.
	NoSPE bool
	Why   string
}

// Missing is a memory sampling facility this host lacks or this exporter
// cannot use, and why.
type Missing struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// Plan chooses the memory events of this host's PMUs, plus the events the
// user asked for by spec (sampled with the same record layout).
func Plan(pmus []*pmu.PMU, o Options) ([]Config, []Missing, error) {
	var out []Config
	var missing []Missing
	memType := uint64(SampleType | WeightStruct)
	if o.Cgroup {
		memType |= Cgroup
	}
	for _, p := range pmus {
		switch {
		case p.IsCore() && p.Aliases["mem-loads"].Terms != "":
			cs, err := intel(p, o, memType)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, cs...)
		case p.Name == "ibs_op":
			c, err := ibsOp(p, o, memType)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, c)
		case strings.HasPrefix(p.Name, "arm_spe") && o.NoSPE:
			missing = append(missing, Missing{What: p.Name, Why: o.Why})
		case strings.HasPrefix(p.Name, "arm_spe"):
			c, err := armSPE(p, o)
			if err != nil {
				return nil, nil, err
			}
			if o.Cgroup {
				// Its records carry no cgroup: the reader looks each
				// process's up (perfsample.Options.CgroupOf).
				c.SampleType |= Cgroup
			}
			out = append(out, c)
		}
	}
	if len(out) == 0 && len(missing) == 0 {
		missing = append(missing, Missing{What: "precise memory sampling",
			Why: "no PMU here offers it (Intel PEBS mem-loads, AMD IBS op, Arm SPE); virtual machines rarely expose one"})
	}
	for _, spec := range o.Events {
		evs, err := eventspec.Resolve(spec, pmus)
		if err != nil {
			return nil, nil, fmt.Errorf("--collector.sampling.event: %w", err)
		}
		for _, e := range evs {
			st := uint64(SampleType)
			if o.Cgroup {
				st |= Cgroup
			}
			if e.Attr.Type == unix.PERF_TYPE_SOFTWARE {
				// With PERF_SAMPLE_PERIOD the kernel samples every software
				// event, whatever the period (perf_swevent_event); without
				// it the period holds, and the sampler knows it.
				st &^= unix.PERF_SAMPLE_PERIOD
			}
			out = append(out, Config{Name: e.Name, PMU: e.PMU, Attr: e.Attr, SampleType: st, Period: o.Period, CPUs: e.CPUs})
		}
	}
	return out, missing, nil
}

// AuxSampleType is what an AUX event (Arm SPE) records of the records in
// its data area (sample_id_all): the AUX records that announce its
// chunks, and its context switches, which say whose records they are.
const AuxSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU

// speInterval is what the SPE driver keeps of a period: PMSIRR_EL1's
// interval field, bits 31:8 (arm_spe_event_sanitise_period).
const speInterval = 256

// armSPE samples loads and stores with Arm's Statistical Profiling
// Extension on the CPUs of its cpumask: one operation in period, recorded
// if it is a load or a store (load_filter, store_filter), with its
// timestamp (ts_enable) and a jittered interval (jitter) where the PMU has
// the terms. No minimum latency, unlike PEBS loads: it would drop the
// stores that false sharing is found in. No physical addresses or
// physical timer (pa_enable, pct_enable): they need CAP_PERFMON, and the
// virtual counter is the one the metadata page converts to perf time.
func armSPE(p *pmu.PMU, o Options) (Config, error) {
	var terms []string
	for _, t := range []string{"ts_enable", "load_filter", "store_filter", "jitter"} {
		if _, ok := p.Formats[t]; ok {
			terms = append(terms, t+"=1")
		}
	}
	if _, ok := p.Formats["ts_enable"]; !ok {
		return Config{}, fmt.Errorf("Arm SPE %s: no ts_enable term, without which its records carry no time", p.Name)
	}
	evs, err := eventspec.Resolve(p.Name+"/"+strings.Join(terms, ",")+"/", []*pmu.PMU{p})
	if err != nil {
		return Config{}, fmt.Errorf("Arm SPE: %w", err)
	}
	c := Config{Name: "arm_spe", PMU: p.Name, Attr: evs[0].Attr, SampleType: AuxSampleType, Memory: true, Aux: true,
		PeriodAlign: speInterval, CPUs: p.CPUMask}
	if c.CPUs == nil {
		c.CPUs = p.CPUs
	}
	c.Period = c.Align(o.Period)
	if v, err := strconv.ParseUint(strings.TrimSpace(p.Caps["min_interval"]), 0, 64); err == nil {
		c.Period = max(c.Period, c.Align(v))
	}
	c.Period = max(c.Period, speInterval)
	return c, nil
}

// intel samples PEBS load latency above the threshold and stores, at the
// PMU's best precise_ip; on Sapphire Rapids and later mem-loads needs the
// mem-loads-aux event as its group leader, or the kernel refuses it.
func intel(p *pmu.PMU, o Options, st uint64) ([]Config, error) {
	precise := uint8(3)
	if v, err := strconv.Atoi(p.Caps["max_precise"]); err == nil && v < 3 {
		precise = uint8(v)
	}
	var out []Config
	loads, err := eventspec.Resolve(fmt.Sprintf("%s/mem-loads,ldlat=%d/", p.Name, o.LdLat), []*pmu.PMU{p})
	if err != nil {
		return nil, fmt.Errorf("PEBS mem-loads on %s: %w", p.Name, err)
	}
	l := Config{Name: "mem-loads", PMU: p.Name, Attr: loads[0].Attr, SampleType: st, Period: o.Period, CPUs: p.CPUs, Memory: true, IPAfter: precise == 1}
	l.Attr.PreciseIP = precise
	if p.Aliases["mem-loads-aux"].Terms != "" {
		aux, err := eventspec.Resolve(p.Name+"/mem-loads-aux/", []*pmu.PMU{p})
		if err != nil {
			return nil, fmt.Errorf("PEBS mem-loads-aux on %s: %w", p.Name, err)
		}
		l.Leader = &aux[0].Attr
	}
	out = append(out, l)
	if p.Aliases["mem-stores"].Terms != "" {
		stores, err := eventspec.Resolve(p.Name+"/mem-stores/", []*pmu.PMU{p})
		if err != nil {
			return nil, fmt.Errorf("PEBS mem-stores on %s: %w", p.Name, err)
		}
		s := Config{Name: "mem-stores", PMU: p.Name, Attr: stores[0].Attr, SampleType: st &^ WeightStruct, Period: o.Period, CPUs: p.CPUs, Memory: true, IPAfter: precise == 1}
		s.Attr.PreciseIP = precise
		out = append(out, s)
	}
	return out, nil
}

// ibsOp samples AMD's IBS op by dispatched ops (cnt_ctl=1), so the period
// counts instructions' ops rather than cycles; the kernel decodes the IBS
// registers into data_src and, for loads that missed, weight (Linux 6.1).
func ibsOp(p *pmu.PMU, o Options, st uint64) (Config, error) {
	terms := p.Name + "//"
	if _, ok := p.Formats["cnt_ctl"]; ok {
		terms = p.Name + "/cnt_ctl=1/"
	}
	evs, err := eventspec.Resolve(terms, []*pmu.PMU{p})
	if err != nil {
		return Config{}, fmt.Errorf("IBS op: %w", err)
	}
	// IBS periods are multiples of 16 (the hardware drops the low four bits).
	c := Config{Name: "ibs_op", PMU: p.Name, Attr: evs[0].Attr, SampleType: st, AddrOnly: true, Memory: true, PeriodAlign: 16}
	c.Period = max(c.Align(o.Period), 16)
	return c, nil
}
