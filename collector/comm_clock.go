package collector

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// accessClock is the host's loads and stores in perf syntax, the clock
// ReuseTracker counts: Intel's MEM_INST_RETIRED.ALL_LOADS and ALL_STORES
// (event 0xd0, umasks 0x81, 0x82, retired; P- and E-cores alike), AMD
// Zen's ls_dispatch (event 0x29, umask 0x7: loads, stores and
// load-op-stores dispatched, so speculative ones too), Arm's MEM_ACCESS
// (event 0x13), on the host's one core PMU (a hybrid CPU's threads move
// between two, which one group cannot follow).
func accessClock(cpu host.CPU, pmus []*pmu.PMU) (string, error) {
	var cores []string
	for _, p := range pmus {
		if p.IsCore() {
			cores = append(cores, p.Name)
		}
	}
	switch {
	case len(cores) == 0:
		return "", errNoCore
	case len(cores) > 1:
		return "", fmt.Errorf("core PMUs %v (%w): a thread moves between them, and its group holds one PMU's events", cores, errHybrid)
	}
	c := cores[0]
	family, _ := strconv.Atoi(cpu.Family)
	switch {
	case cpu.Vendor == "GenuineIntel":
		return c + "/event=0xd0,umask=0x81/+" + c + "/event=0xd0,umask=0x82/", nil
	case (cpu.Vendor == "AuthenticAMD" || cpu.Vendor == "HygonGenuine") && family >= 0x17:
		return c + "/event=0x29,umask=0x7/", nil
	case strings.HasPrefix(c, "armv8_") || strings.HasPrefix(c, "armv9_"):
		// The kernel lists a PMUv3's common events that the CPU says it
		// implements (PMCEID); a raw event it does not opens all the
		// same and counts nothing (QEMU's arm64 has no MEM_ACCESS).
		i := slices.IndexFunc(pmus, func(p *pmu.PMU) bool { return p.Name == c })
		if _, ok := pmus[i].Aliases["mem_access"]; !ok {
			return "", fmt.Errorf("the %s PMU does not list mem_access (event 0x13) among its events: this CPU does not count it", c)
		}
		return c + "/event=0x13/", nil
	}
	return "", fmt.Errorf("no loads and stores events known for the %s (family %s) core PMU %s", cpu.Vendor, cpu.Family, c)
}

// closedEvent: one of a clock's events resolved but did not open here.
type closedEvent struct {
	part string
	err  error
}

func (e *closedEvent) Error() string { return e.part + " does not open here: " + e.err.Error() }

// openAll resolves each event of spec (perf syntax, joined by +) to one
// event and opens it with probe.
func openAll(spec string, pmus []*pmu.PMU, probe func(eventspec.Attr) error) error {
	for _, part := range strings.Split(spec, "+") {
		evs, err := eventspec.Resolve(part, pmus)
		if err == nil && len(evs) != 1 {
			err = fmt.Errorf("%d events", len(evs))
		}
		if err == nil {
			err = probe(evs[0].Attr)
		}
		if err != nil {
			return &closedEvent{part, err}
		}
	}
	return nil
}

// bestReuseClock is the best distance clock this host counts, in the
// order ReuseTracker prefers them: its loads and stores (unit accesses),
// else its retired instructions (unit instructions) where one core PMU
// counts them but no loads and stores events are known for it or open,
// else none (unit "": the thread's CPU time); why says why not loads and
// stores. Each event is opened by probe (on the calling thread) before
// it is chosen: a PMU need not implement a generic event either.
func bestReuseClock(cpu host.CPU, pmus []*pmu.PMU, probe func(eventspec.Attr) error) (spec, unit string, why error) {
	spec, why = accessClock(cpu, pmus)
	if why == nil {
		if why = openAll(spec, pmus, probe); why == nil {
			return spec, reuse.ClockAccesses, nil
		}
	}
	if errors.Is(why, errNoCore) || errors.Is(why, errHybrid) {
		return "", "", why
	}
	if err := openAll(unitInstructions, pmus, probe); err != nil {
		return "", "", fmt.Errorf("%w; retired instructions: %w", why, err)
	}
	return unitInstructions, unitInstructions, why
}

// unitInstructions is the generic retired-instructions event, and the unit
// of distances counted in it.
const unitInstructions = "instructions"

// errNoCore: no core PMU counts anything per thread here.
var errNoCore = errors.New("no core PMU here counts loads and stores")

// errHybrid: the host has two core PMUs, and one thread's group cannot
// count on both.
var errHybrid = errors.New("a hybrid CPU")

// accessCounting judges whether this host counts each thread's loads and
// stores (accessClock's events, each opened on the calling thread by
// probe), for pmu_capability and check; hw is the hardware_counters
// verdict, whose fix is this one's where no core PMU exists.
func accessCounting(cpu host.CPU, pmus []*pmu.PMU, hw capability.Feature, probe func(eventspec.Attr) error) capability.Feature {
	f := capability.Feature{Name: capability.AccessCounting}
	spec, unit, err := bestReuseClock(cpu, pmus, probe)
	if err == nil {
		f.Available = true
		f.Detail = "each thread's loads and stores counted (" + spec + "): reuse distances in accesses, LRU stack distances and miss ratios with --collector.comm.reuse-clock=accesses"
		return f
	}
	// What --collector.comm.reuse-clock=accesses falls back to (setupComm).
	instead := "the thread's CPU time"
	if unit == unitInstructions {
		instead = "retired instructions"
	}
	f.Reason = err.Error() + "; with --collector.comm.reuse-clock=accesses reuse distances are in " + instead + ", without stack distances or miss ratios"
	var closed *closedEvent
	switch {
	case !hw.Available:
		f.Fix = hw.Fix
	case errors.Is(err, errHybrid):
		f.Fix = "pin the watched workloads to one core type's CPUs and name that PMU's events: --collector.comm.reuse-clock=accesses=PMU/EVENT/+..."
	case errors.As(err, &closed) && closed.part != unitInstructions:
		f.Fix = "perf stat -e " + closed.part + " true says why (perf_event_paranoid, CAP_PERFMON, a counter the hypervisor hides)"
	default:
		f.Fix = "name events that count this CPU's loads and stores: --collector.comm.reuse-clock=accesses=EVENT+EVENT"
	}
	return f
}

// reuseClockEvents resolves the events of --collector.comm.reuse-clock
// (perf syntax, joined by +) against the host's PMUs; none for "". A
// generic event of a hybrid host resolves to one event per core PMU, which
// one group cannot hold: refused.
func reuseClockEvents(spec string, pmus []*pmu.PMU) ([]unix.PerfEventAttr, error) {
	if spec == "" {
		return nil, nil
	}
	var attrs []unix.PerfEventAttr
	for _, part := range strings.Split(spec, "+") {
		evs, err := eventspec.Resolve(part, pmus)
		if err != nil {
			return nil, err
		}
		if len(evs) != 1 {
			return nil, fmt.Errorf("%s is %d events here (one per core PMU of a hybrid CPU); a thread's group holds one PMU's: name the PMU", part, len(evs))
		}
		a := perf.Attr(evs[0].Attr)
		a.Read_format = 0
		attrs = append(attrs, a)
	}
	return attrs, nil
}

// commConfigs are what the comm collector samples: the host's precise
// memory events where it has them (PEBS, IBS, and SPE where the sampling
// collector does not hold it: an access per sample, counted in accesses,
// the width decoded from the sampled instruction), else
// cpu-clock in user mode with the registers, decoded (timer samples: a
// share of time); and the source label of their detections.
func commConfigs(pmus []*pmu.PMU, periodNS uint64, s samplingFlags, perCgroup bool) ([]sampling.Config, string, error) {
	// Arm SPE admits one event per CPU: where the sampling collector
	// takes it, or it is left to other tools, this one samples with the
	// address sampler.
	noSPE := s.enabled || !s.spe
	precise, err := sampling.Precise(pmus, sampling.Options{Period: s.period, LdLat: s.ldlat, Cgroup: perCgroup, NoSPE: noSPE})
	if err != nil {
		return nil, "", fmt.Errorf("address sampler: %w", err)
	}
	if len(precise) > 0 {
		return precise, precise[0].Source(), nil
	}
	return []sampling.Config{sampling.Decoded(periodNS, perCgroup, memop.RegsMask(runtime.GOARCH))}, "decode", nil
}
