package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/units"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/collectors/perf"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfsample"
	"github.com/pmu-exporter/pmu_exporter/collectors/watch"
	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
	"github.com/pmu-exporter/pmu_exporter/comm/reuse"
	"github.com/pmu-exporter/pmu_exporter/comm/samplestat"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podmeta"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// commFlags are the comm collector's options.
type commFlags struct {
	period    uint64 // ns of CPU time between samples, per CPU
	window    int
	budget    float64
	perCgroup bool
	cgroups   []string // sample only these cgroups' tasks (perf's cgroup mode)
	pods      string   // all, or annotated: only pods annotated pmu-exporter.io/comm=true
	// watchpoints adds ComDetective's trap path in the selected workloads'
	// threads, at most maxWatched of them.
	watchpoints bool
	maxWatched  int
	watchBudget float64 // share of a watched process's CPU time its traps may cost
	// reuse runs ReuseTracker on the watchpoints instead, in reuseMode
	// (private or shared).
	reuse     bool
	reuseMode string
	// reuseClock: events whose counts are the private distance clock
	// (perf syntax joined by +; "": the thread's CPU time).
	reuseClock string
	// decodeCache bounds the decoder's cache of decoded instructions.
	decodeCache units.Base2Bytes
}

// liveComm runs the address sampler: cpu-clock in user mode on every CPU
// with the user registers, each sample resolved to the access its
// instruction makes, feeding ComDetective's detector (/debug/comm and
// pmu_comm_*) and, where no precise PMU feeds one, the shared-line table
// (/debug/cachelines and pmu_sampling_*). Where it cannot, it says why
// (a factory logs its own failure).
func liveComm(b *build) error {
	err := setupComm(b)
	if err != nil {
		b.log.Error("comm collector not running; pmu_collector_success{collector=\"comm\"} is 0", "err", err)
	}
	return err
}

func setupComm(b *build) error {
	p, o := b.p, b.f.comm
	root, _ := cgroupRoot(b.f.cgroups, *b.s)
	perCgroup := o.perCgroup && root != ""
	cfgs, source, err := commConfigs(b.s.pmus, o.period, b.f.sampling, perCgroup)
	if err != nil {
		return err
	}
	det := comdetect.New(comdetect.Options{Window: comdetect.Window(o.window, source != "decode")})
	dec, err := perfsample.NewDecoder(b.f.procfs, det)
	if err != nil {
		return err
	}
	dec.SetDecodeCache(int(o.decodeCache))
	doms := host.NewLLCDomains(b.f.sysfs)
	for _, cpu := range b.s.facts.OnlineCPUs {
		name, ok := doms.Of(cpu)
		switch {
		case !ok:
			b.log.Warn("a CPU's last-level cache is not in sysfs: its communication is folded as a domain of its own", "cpu", cpu)
		case strings.HasPrefix(name, host.PackageDomainPrefix):
			b.log.Info("sysfs describes no caches of this CPU: its communication is folded by package, not by last-level cache", "cpu", cpu, "domain", name)
		}
	}
	dec.SetDomains(doms.Of)
	stats := samplestat.New(len(cfgs), b.f.sampling.maxLines)
	stats.SetSharingWindow(b.f.sampling.sharingWindow)
	if perCgroup {
		stats.TrackCgroups(b.f.cgroups.maxSeries)
	}
	if o.watchpoints && o.reuse {
		return errors.New("--collector.comm.watchpoints and --collector.comm.reuse both want the debug registers: choose one (or let each pod choose: --collector.comm.pods=annotated)")
	}
	set := &commSamplers{b: b, cfgs: cfgs, stats: stats, dec: dec, root: root, running: map[string]*commSampler{},
		nodeRegs: o.registers(), said: map[string]string{}}
	// One sampler on every CPU, or one per selected cgroup (perf's cgroup
	// mode: only their tasks are sampled, and cost nothing elsewhere), or
	// one per pod annotated pmu-exporter.io/comm, followed as pods come
	// and go.
	var annotated podAnnotations
	switch {
	case o.pods == "annotated":
		var ok bool
		if annotated, ok = b.names.(podAnnotations); !ok || root == "" {
			return errors.New("--collector.comm.pods=annotated needs the pods' annotations (--kubernetes.node-name) and a cgroup hierarchy with the perf_event controller")
		}
	case len(o.cgroups) > 0:
		if root == "" {
			return errors.New("--collector.comm.cgroup: no cgroup hierarchy holds the perf_event controller")
		}
		set.budgetShare = len(o.cgroups)
		for _, cg := range o.cgroups {
			if err := set.open(cg, set.nodeRegs); err != nil {
				set.closeAll()
				return fmt.Errorf("--collector.comm.cgroup: %w", err)
			}
		}
	default:
		if set.nodeRegs != regsNone {
			return errors.New("watchpoints (--collector.comm.watchpoints, --collector.comm.reuse) arm every thread of what is sampled: select the workloads (--collector.comm.cgroup or --collector.comm.pods=annotated)")
		}
		if err := set.open("", regsNone); err != nil {
			return err
		}
	}
	p.closers = append(p.closers, set.closeAll)
	p.cpuResets = append(p.cpuResets, set.resetCPU)
	// The watchpoint engine: where the node's flags ask for it, or where
	// annotated pods may (pmu-exporter.io/comm: watchpoints or reuse); in
	// the second case a host whose breakpoints do not work still samples
	// them, and says so.
	var engine *watch.Engine
	if set.nodeRegs != regsNone || annotated != nil {
		var err error
		engine, err = setupWatchpoints(b, dec, &o, annotated != nil)
		switch {
		case err != nil && (set.nodeRegs != regsNone || !errors.Is(err, errNoBreakpoints)):
			set.closeAll()
			return err
		case err != nil:
			// Said again, as a warning, for each pod that asks.
			b.log.Info("address sampler: pods annotated pmu-exporter.io/comm: watchpoints or reuse will only be sampled", "err", err)
		default:
			p.closers = append(p.closers, engine.Close)
		}
	}
	set.watchpoints = engine != nil
	reuseOn := engine != nil && (o.reuse || annotated != nil)
	coll := exporter.NewComm(dec).WithSource(source)
	if source == "decode" {
		b.log.Info("address sampler", "event", "cpu-clock:u", "period_ns", o.period, "window", det.Window(), "cgroups", len(o.cgroups), "pods", o.pods)
		coll.WithPeriods(set.periods)
	} else {
		for _, c := range cfgs {
			b.log.Info("address sampler: precise memory samples", "source", source, "event", c.Name, "period", c.Period, "window", det.Window(), "cgroups", len(o.cgroups), "pods", o.pods)
		}
	}
	if engine != nil {
		coll.WithWatch(func() exporter.WatchStats {
			w := dec.WatchStats()
			g, budget, cost, ok := dec.Governed()
			threads, reuseThreads := dec.WatchedThreads()
			return exporter.WatchStats{Traps: w.Traps, Unresolved: w.Unresolved, Lost: w.Lost, Arms: w.Arms, Recorded: w.Communication, Reuse: w.Reuse,
				Threads: threads, ReuseThreads: reuseThreads, Joined: w.Joined,
				Governed: ok, Budget: budget, TrapCost: cost, CPU: g.CPU, Cost: g.Spent, Denied: g.Denied}
		})
	}
	var cgNames *cgroupNames
	if perCgroup {
		cgNames = &cgroupNames{r: cgroupid.New(root), gone: map[uint64]time.Time{}}
		coll.PerCgroup(stats, cgNames, b.names)
	}
	if reuseOn {
		var ids exporter.CgroupIDs
		if cgNames != nil {
			ids = cgNames
		}
		rc := exporter.NewReuse(dec, ids, b.names)
		if o.reuseClock == reuse.UnitAccesses && len(b.s.facts.OnlineCPUs) > 0 {
			// Miss ratios at this host's caches (the first online CPU's).
			cpu := b.s.facts.OnlineCPUs[0]
			if c, err := host.ReadCacheFacts(b.f.sysfs, cpu, b.s.facts.CPU.Vendor, cpuidOn(cpu)); err != nil {
				b.log.Warn("reuse: no miss ratios at this host's cache sizes", "err", err)
			} else {
				rc.WithCaches(c.L1d, c.L2, c.LLC)
				if unsized := c.Unsized(); len(unsized) > 0 {
					why := "the firmware (devicetree or ACPI PPTT) gives the kernel no size for them, or the CPU has no such level"
					if c.Source != "sysfs" {
						why = "sysfs describes no caches, and " + c.Source + " does not size them"
						if c.Untrusted != "" {
							why += " (" + c.Untrusted + ")"
						}
					}
					b.log.Warn("reuse: no miss ratios at caches of unknown size", "caches", strings.Join(unsized, ","), "source", c.Source, "why", why)
				}
			}
		}
		p.collectors = append(p.collectors, rc)
	}
	p.collectors = append(p.collectors, coll)
	if !p.hasHandler("/debug/cachelines") { // no precise sampler: this one feeds the table
		p.collectors = append(p.collectors, exporter.NewSampling(set, stats))
		p.handlers = append(p.handlers, Handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, func() func(uint32, uint64) string { return nil })})
	}
	p.handlers = append(p.handlers, Handler{"/debug/comm", "Communication matrices (?pid=N, ?pod=NAME)", commHandler(dec, podOfPID(b.f.procfs, b.names))})
	p.beside = append(p.beside, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			forgetExited(ctx, dec, b.f.procfs)
		}()
		if cgNames != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holders := []cgroupTotals{statsTotals(stats)}
				if reuseOn {
					holders = append(holders, cgroupTotals{dec.ReuseCgroupIDs, dec.ForgetReuseCgroups})
				}
				cgNames.sweepEvery(ctx, b.f.cgroups.grace, holders...)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			set.run(ctx, annotated)
		}()
		if engine != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				set.watchThreads(ctx, o.maxWatched)
			}()
		}
		wg.Wait()
	})
	return nil
}

// errNoBreakpoints: this host's breakpoints cannot be opened, or do not
// trap.
var errNoBreakpoints = errors.New("no working watchpoints")

// setupWatchpoints opens the watchpoint engine and puts the decoder's
// algorithms on it, each where the node's flags or any pod (anyPod, the
// pods choosing by annotation) may ask for it: ComDetective's trap path,
// and ReuseTracker with its distance clock (o.reuseClock becomes the unit
// it resolves to); and the governor of the traps' cost. Errors that say
// the host has no working watchpoints wrap errNoBreakpoints; the others
// are the flags'.
func setupWatchpoints(b *build, dec *perfsample.Decoder, o *commFlags, anyPod bool) (*watch.Engine, error) {
	if o.watchBudget <= 0 || o.watchBudget > 1 {
		return nil, fmt.Errorf("--collector.comm.watch-budget=%v: want a share of CPU time in (0, 1]", o.watchBudget)
	}
	slots, err := watch.Slots(16)
	if err != nil {
		return nil, fmt.Errorf("--collector.comm.watchpoints: %w: %w", errNoBreakpoints, err)
	}
	engine, err := watch.New(slots, 64)
	if err != nil {
		return nil, fmt.Errorf("--collector.comm.watchpoints: %w: %w", errNoBreakpoints, err)
	}
	ok := false
	defer func() {
		if !ok {
			engine.Close()
		}
	}()
	reusing, mode := o.reuse || anyPod, reuse.Private
	if o.reuseMode == "shared" {
		mode = reuse.Shared
	}
	if reusing {
		if mode == reuse.Private {
			// Each watched thread sampled on its own CPU time: the
			// reuse distance is that time, read by the kernel, or
			// the events counted beside it.
			if err := engine.SampleEvery(o.period); err != nil {
				return nil, fmt.Errorf("--collector.comm.reuse: %w", err)
			}
			// The clock's unit (the metrics' label) is the events'
			// spec, or accesses: the host's loads and stores, or
			// events the user says count them (accesses=EVENTS).
			spec := o.reuseClock
			if s, ok := strings.CutPrefix(spec, reuse.UnitAccesses+"="); ok {
				spec, o.reuseClock = s, reuse.UnitAccesses
			} else if spec == reuse.UnitAccesses {
				// A node without them still measures reuse, on the
				// next best clock, and says so.
				var unit string
				var why error
				spec, unit, why = bestReuseClock(b.s.facts.CPU, b.s.pmus, perf.Probe)
				switch unit {
				case "":
					b.log.Warn("reuse distances on the thread's CPU time, not in accesses: no stack distances or miss ratios", "reason", why)
				case reuse.UnitAccesses:
				default:
					b.log.Warn("reuse distances in retired instructions, not in accesses: no stack distances or miss ratios", "reason", why)
				}
				o.reuseClock = unit
			}
			attrs, err := reuseClockEvents(spec, b.s.pmus)
			if err == nil && spec != "" {
				// A generic event resolves on any host; one that no
				// PMU here counts would fail each thread's group
				// later, leaving no reuse and no word why.
				err = openAll(spec, b.s.pmus, perf.Probe)
			}
			if err == nil {
				err = engine.CountWith(attrs)
			}
			if err != nil {
				return nil, fmt.Errorf("--collector.comm.reuse-clock=%s: %w", b.f.comm.reuseClock, err)
			}
		} else if o.reuseClock != "" {
			return nil, errors.New("--collector.comm.reuse-clock: shared reuse is timed on CLOCK_MONOTONIC (no one thread's counts measure it)")
		}
	}
	// Measured before the decoder takes the engine: a host where it fails
	// leaves the decoder without one.
	cost, err := watch.TrapCost(1000)
	if err != nil {
		return nil, fmt.Errorf("--collector.comm.watchpoints: measuring a trap's cost: %w: %w", errNoBreakpoints, err)
	}
	if reusing {
		if err := dec.WatchReuse(engine, slots, mode, o.reuseClock); err != nil {
			return nil, fmt.Errorf("--collector.comm.reuse: %w", err)
		}
	}
	if o.watchpoints || anyPod {
		if err := dec.Watch(engine, slots); err != nil {
			return nil, fmt.Errorf("--collector.comm.watchpoints: %w", err)
		}
	}
	dec.Govern(o.watchBudget, cost)
	dec.WatchNewThreads(o.maxWatched)
	b.log.Info("address sampler: watchpoints in the selected workloads' threads", "per_thread", slots, "max_threads", o.maxWatched,
		"trap_cost", cost, "budget", o.watchBudget, "node", o.registers(), "pods_choose", anyPod)
	ok = true
	return engine, nil
}

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
			return spec, reuse.UnitAccesses, nil
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

// commSamplers are the address sampler's samplers, by target cgroup ("":
// every task), each with its reader goroutine once running.
type commSamplers struct {
	b           *build
	cfgs        []sampling.Config
	stats       *samplestat.Stats
	dec         *perfsample.Decoder
	root        string
	budgetShare int // the budget is split among this many samplers (0: 1)
	// nodeRegs is what the selected workloads' debug registers serve by
	// the node's flags (an annotated pod may choose), watchpoints whether
	// the engine runs; said is the annotation value each pod was last
	// told about (a log line per pod and value, not per follow).
	nodeRegs    registers
	watchpoints bool
	said        map[string]string

	mu      sync.Mutex
	running map[string]*commSampler
}

type commSampler struct {
	smp    *perfsample.Sampler
	cgroup *os.File
	regs   registers          // what its threads' debug registers serve
	stop   context.CancelFunc // nil until its reader runs
	done   chan struct{}
	// unsubscribe ends its subscription to the CPU hotplug events.
	unsubscribe func()
}

// registers is what a sampled workload's debug registers serve.
type registers int

const (
	regsNone  registers = iota // nothing: sampling alone
	regsComm                   // ComDetective's trap path
	regsReuse                  // ReuseTracker
)

func (r registers) String() string {
	return [...]string{regsNone: "none", regsComm: "watchpoints", regsReuse: "reuse"}[r]
}

// use is the decoder's name of what the registers serve.
func (r registers) use() perfsample.Use {
	if r == regsReuse {
		return perfsample.Reuse
	}
	return perfsample.Communication
}

// registers is what the node's flags make the selected workloads'
// debug registers serve.
func (o commFlags) registers() registers {
	switch {
	case o.watchpoints:
		return regsComm
	case o.reuse:
		return regsReuse
	}
	return regsNone
}

// podAnnotations are the values of an annotation on this node's pods, by
// pod UID (podmeta.Index).
type podAnnotations interface {
	Annotations(key string) map[string]string
}

// podRegisters is what the annotation value v asks of a pod's debug
// registers, and whether it selects the pod at all: "true" takes the
// node's flags, "watchpoints" and "reuse" choose; anything else does not
// select it.
func (c *commSamplers) podRegisters(v string) (registers, bool) {
	switch v {
	case "true":
		return c.nodeRegs, true
	case "watchpoints":
		return regsComm, true
	case "reuse":
		return regsReuse, true
	}
	return regsNone, false
}

// open opens a sampler for target (a cgroup below root, or "" for every
// task), whose threads' debug registers serve regs.
func (c *commSamplers) open(target string, regs registers) error {
	b := c.b
	share := float64(max(c.budgetShare, 1))
	// The address sampler's samples arm watchpoints, except in private
	// reuse, where the watched threads' own samples do (their leaders
	// wake the trap reader): then each sample wakes the reader, so that
	// an arm follows its sample by the reader's reaction. The poll's
	// timeout stays 100 ms: polling every 10 ms as well, for samples that
	// had already woken it, cost half the exporter's CPU with watchpoints,
	// which its governor took from the samples (docs/benchmarks.md).
	watching := regs == regsComm || regs == regsReuse && b.f.comm.reuseMode == "shared"
	opts := perfsample.Options{
		Logger: b.log, OnlineCPUs: b.online.Read, Pages: b.f.sampling.pages, Poll: 100 * time.Millisecond, Govern: 500 * time.Millisecond, WakeEach: watching,
		MIDR: b.s.midr, AuxBytes: b.f.sampling.auxKiB << 10,
		Governor:  sampling.NewGovernor(b.f.comm.budget/share, b.s.facts.MaxSampleRate),
		AfterRead: func(took time.Duration, _ int) { b.p.health.Observe("comm", took, nil) },
		Decoder:   c.dec,
	}
	root, v1 := cgroupRoot(b.f.cgroups, *b.s)
	opts.CgroupOf = taskCgroups(b.f.procfs, root, v1, b.log)
	cs := &commSampler{regs: regs}
	opts.Hotplug, cs.unsubscribe = b.hotplugEvents()
	if target != "" {
		f, err := os.Open(filepath.Join(c.root, target))
		if err != nil {
			return err
		}
		cs.cgroup, opts.Cgroup = f, f
	}
	smp, failures, err := perfsample.Open(c.cfgs, b.s.facts.OnlineCPUs, c.stats, opts)
	for _, fl := range failures {
		b.log.Warn("address sampler not opened on a CPU", "cpu", fl.CPU, "cgroup", target, "err", fl.Err)
	}
	if err != nil {
		cs.unsubscribe()
		if cs.cgroup != nil {
			cs.cgroup.Close()
		}
		return fmt.Errorf("address sampler: %w", err)
	}
	cs.smp = smp
	c.mu.Lock()
	c.running[target] = cs
	c.mu.Unlock()
	return nil
}

// start runs a sampler's reader until ctx ends or it is closed.
func (c *commSamplers) start(ctx context.Context, cs *commSampler) {
	ctx, cs.stop = context.WithCancel(ctx)
	cs.done = make(chan struct{})
	go func() {
		defer close(cs.done)
		if err := cs.smp.Run(ctx); err != nil {
			c.b.log.Error("address sampler stopped", "err", err)
			c.b.p.health.Observe("comm", 0, err)
		}
	}()
}

// close stops and closes the sampler of target.
func (c *commSamplers) close(target string) {
	c.mu.Lock()
	cs := c.running[target]
	delete(c.running, target)
	c.mu.Unlock()
	if cs == nil {
		return
	}
	if cs.stop != nil {
		cs.stop()
		<-cs.done
	}
	cs.smp.Close()
	cs.unsubscribe()
	if cs.cgroup != nil {
		cs.cgroup.Close()
	}
}

func (c *commSamplers) closeAll() {
	for _, t := range c.targets() {
		c.close(t)
	}
}

func (c *commSamplers) targets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.running))
	for t := range c.running {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func (c *commSamplers) resetCPU(cpu int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cs := range c.running {
		cs.smp.ResetCPU(cpu)
	}
}

// periods are the samplers' periods, in target order.
func (c *commSamplers) periods() []uint64 {
	var out []uint64
	for _, t := range c.targets() {
		c.mu.Lock()
		if cs := c.running[t]; cs != nil {
			out = append(out, cs.smp.Period(0))
		}
		c.mu.Unlock()
	}
	return out
}

// run reads the samplers until ctx ends; with annotated, it follows the
// annotated pods every podsEvery: a sampler per pod cgroup.
func (c *commSamplers) run(ctx context.Context, annotated podAnnotations) {
	c.mu.Lock()
	for _, cs := range c.running {
		c.start(ctx, cs)
	}
	c.mu.Unlock()
	if annotated != nil {
		t := time.NewTicker(podsEvery)
		defer t.Stop()
		for ctx.Err() == nil {
			c.follow(ctx, c.annotatedPods(annotated.Annotations(podmeta.CommAnnotation)))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}
	<-ctx.Done()
	c.mu.Lock()
	var done []chan struct{}
	for _, cs := range c.running {
		if cs.done != nil {
			done = append(done, cs.done)
		}
	}
	c.mu.Unlock()
	for _, d := range done {
		<-d
	}
}

// Configs and Period make the set the sampling collector's source: one
// event, at the period of the first sampler (or the configured one).
func (c *commSamplers) Configs() []sampling.Config { return c.cfgs }

// Period implements exporter.SamplingSource.
func (c *commSamplers) Period(int) uint64 {
	if p := c.periods(); len(p) > 0 {
		return p[0]
	}
	return c.cfgs[0].Period
}

// watchThreads gives the decoder the threads of the sampled cgroups, every
// second, at most max of them, and reads the traps as they come.
func (c *commSamplers) watchThreads(ctx context.Context, max int) {
	follow := time.NewTicker(time.Second)
	defer follow.Stop()
	// The governor's budget grows with the watched processes' CPU time,
	// read ten times a second so that a process just watched need not
	// wait a second for its first arms.
	ran := time.NewTicker(100 * time.Millisecond)
	defer ran.Stop()
	// The traps are read as they come: each ends its slot's sample, and
	// the slot's watchpoints in the other threads wait to be disarmed.
	// watchThreads returns only once this reader has, so that closing the
	// engine never unmaps a ring it reads.
	reading := make(chan struct{})
	defer func() { <-reading }()
	go func() {
		defer close(reading)
		periodFailed := false
		for ctx.Err() == nil {
			if err := c.dec.WaitTraps(100 * time.Millisecond); err != nil {
				c.b.log.Error("watchpoint traps not read", "err", err)
				return
			}
			c.dec.ReadTraps(c.Period(0))
			if !c.cfgs[0].Memory { // timer samples: the watched threads' own follow their period
				if err := c.dec.SampleReuseEvery(c.Period(0)); err != nil && !periodFailed {
					periodFailed = true // said once
					c.b.log.Error("reuse: the watched threads' sample period not changed", "err", err)
				}
			}
		}
	}()
	watched := map[uint32]perfsample.Use{}
	procs, err := cgroupid.NewThreadProcs(c.b.f.procfs)
	if err != nil {
		c.b.log.Warn("the watched pods' threads cannot be followed", "err", err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-reading:
			if ctx.Err() != nil {
				return // shutting down
			}
			// The reader stopped on an error (logged): a watchpoint nobody
			// reads and disarms traps on every access, so none stays.
			for pid, use := range watched {
				c.dec.SetWatched(pid, nil, use)
			}
			c.b.log.Error("watchpoints closed in every watched thread: their traps can no longer be read")
			return
		case <-ran.C:
			for pid := range watched {
				if cpu, err := watch.ProcessCPU(pid); err == nil {
					c.dec.Ran(pid, cpu.Seconds())
				}
			}
		case <-follow.C:
			byPID := map[uint32][]uint32{}
			useOf := map[uint32]perfsample.Use{}
			n := 0
			for _, target := range c.targets() {
				c.mu.Lock()
				cs := c.running[target]
				c.mu.Unlock()
				if cs == nil || cs.regs == regsNone {
					continue
				}
				for _, tid := range cgroupid.Threads(filepath.Join(c.root, target)) {
					if n >= max {
						break
					}
					if pid, ok := procs.Of(tid); ok {
						byPID[pid] = append(byPID[pid], tid)
						useOf[pid] = cs.regs.use()
						n++
					}
				}
			}
			procs.ForgetUnlisted()
			for pid, use := range watched {
				if byPID[pid] == nil {
					c.dec.SetWatched(pid, nil, use)
					delete(watched, pid)
				}
			}
			for pid, tids := range byPID {
				if err := c.dec.SetWatched(pid, tids, useOf[pid]); err != nil {
					c.b.log.Debug("watchpoints not opened in some threads", "pid", pid, "err", err)
				}
				if use, ok := watched[pid]; !ok || use != useOf[pid] {
					if cpu, err := watch.ProcessCPU(pid); err == nil {
						c.dec.Ran(pid, cpu.Seconds()) // the time it ran unwatched does not count
					}
				}
				watched[pid] = useOf[pid]
			}
		}
	}
}

// podsEvery is how often the annotated pods are looked for.
const podsEvery = 5 * time.Second

// follow opens samplers for the cgroups of pods newly annotated and closes
// those of pods gone or no longer annotated.
func (c *commSamplers) follow(ctx context.Context, pods map[string]registers) {
	want := podCgroups(c.root, pods)
	have := c.targets()
	for _, t := range have {
		c.mu.Lock()
		cs := c.running[t]
		c.mu.Unlock()
		if cs == nil {
			continue // closed meanwhile (shutting down)
		}
		if w, ok := want[t]; !ok || w != cs.regs {
			c.close(t)
			c.b.log.Info("address sampler: pod no longer selected as it was", "cgroup", t, "registers", cs.regs)
		}
	}
	have = c.targets()
	for t, regs := range want {
		if slices.Contains(have, t) {
			continue
		}
		if err := c.open(t, regs); err != nil {
			c.b.log.Warn("address sampler: annotated pod not sampled", "cgroup", t, "err", err)
			continue
		}
		c.mu.Lock()
		c.start(ctx, c.running[t])
		c.mu.Unlock()
		c.b.log.Info("address sampler: sampling annotated pod", "cgroup", t, "registers", regs)
	}
}

// annotatedPods are the pods the annotation values by UID select, with
// what their debug registers serve: none where the engine does not run
// (said once per pod). A value that selects nothing and is not "false"
// is said once per pod too.
func (c *commSamplers) annotatedPods(values map[string]string) map[string]registers {
	out := map[string]registers{}
	for uid, v := range values {
		regs, ok := c.podRegisters(v)
		tell := c.said[uid] != v
		c.said[uid] = v
		switch {
		case !ok:
			if tell && v != "false" {
				c.b.log.Warn("address sampler: pod not selected: "+podmeta.CommAnnotation+" takes true, watchpoints, reuse or false", "pod_uid", uid, "value", v)
			}
			continue
		case regs != regsNone && !c.watchpoints:
			if tell {
				c.b.log.Warn("address sampler: pod sampled without watchpoints: none work here (see the start's log, pmu_exporter check)", "pod_uid", uid, "value", v)
			}
			regs = regsNone
		}
		out[uid] = regs
	}
	for uid := range c.said {
		if _, ok := values[uid]; !ok {
			delete(c.said, uid)
		}
	}
	return out
}

// podCgroups finds the pod-level cgroups (below root) of the pods uids, as
// the kubelet lays them out (podcgroup.Parse).
func podCgroups(root string, pods map[string]registers) map[string]registers {
	if len(pods) == 0 {
		return nil
	}
	out := map[string]registers{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if strings.Count(rel, "/") > 6 {
			return filepath.SkipDir
		}
		if id, ok := podcgroup.Parse(rel); ok && id.PodUID != "" && id.ContainerID == "" {
			if v, ok := pods[id.PodUID]; ok {
				out["/"+rel] = v
				return filepath.SkipDir // its containers are inside it
			}
		}
		return nil
	})
	return out
}

// forgetExited drops, every minute, what the decoder keeps of processes
// and threads that exited.
func forgetExited(ctx context.Context, dec *perfsample.Decoder, proc string) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sweepExited(dec, proc)
	}
}

// sweepExited forgets the processes and threads known to dec that proc
// no longer lists, then closes the files none of the rest maps. The
// decoder's lock is held only to list them, not while proc is read.
func sweepExited(dec *perfsample.Decoder, proc string) {
	known := map[uint32][]uint32{}
	dec.View(func(det *comdetect.Detector, _ memop.Outcomes) {
		for _, pid := range det.PIDs() {
			known[pid] = det.Threads(pid)
		}
	})
	gone := func(path string) bool {
		_, err := os.Stat(path)
		return errors.Is(err, os.ErrNotExist)
	}
	for pid, tids := range known {
		dir := filepath.Join(proc, strconv.Itoa(int(pid)))
		if gone(dir) {
			dec.Exited(pid)
			continue
		}
		var exited []uint32
		for _, tid := range tids {
			if gone(filepath.Join(dir, "task", strconv.Itoa(int(tid)))) {
				exited = append(exited, tid)
			}
		}
		if len(exited) > 0 {
			dec.ThreadsExited(pid, exited)
		}
	}
	dec.CloseIdleCode()
}

// commView is the detector as /debug/comm reads it, live or replayed.
type commView interface {
	View(f func(det *comdetect.Detector, out memop.Outcomes))
	Symbolize(pid uint32, ip uint64) string
}

// podOfPID names the pod of a process from its cgroups (/proc/PID/cgroup):
// "namespace/pod" where the API names it, else the pod's UID; "" outside
// pods.
func podOfPID(proc string, names exporter.PodNames) func(pid uint32) []string {
	fs, err := procfs.NewFS(proc)
	return func(pid uint32) []string {
		if err != nil {
			return nil
		}
		p, err := fs.Proc(int(pid))
		if err != nil {
			return nil
		}
		cgs, err := p.Cgroups()
		if err != nil {
			return nil
		}
		for _, cg := range cgs {
			id, ok := podcgroup.Parse(cg.Path)
			if !ok {
				continue
			}
			out := []string{id.PodUID}
			if names != nil {
				if ns, pod, _, ok := names.Names(id); ok {
					out = append(out, pod, ns+"/"+pod)
				}
			}
			return out
		}
		return nil
	}
}

// commHandler serves the matrices as `pmu_exporter comm --format json`
// prints them; ?pid=N keeps one process, ?pod= the processes of a pod
// (its name, namespace/name or UID).
func commHandler(dec commView, podOf func(pid uint32) []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var pid uint64
		if v := r.URL.Query().Get("pid"); v != "" {
			var err error
			if pid, err = strconv.ParseUint(v, 10, 32); err != nil || pid == 0 {
				http.Error(w, "pid: want a process id, got "+strconv.Quote(v), http.StatusBadRequest)
				return
			}
		}
		n := 10
		if v := r.URL.Query().Get("lines"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 || k > 1000 {
				http.Error(w, "lines: want a number from 0 to 1000, got "+strconv.Quote(v), http.StatusBadRequest)
				return
			}
			n = k
		}
		var ms []comdetect.Matrix
		dec.View(func(det *comdetect.Detector, _ memop.Outcomes) {
			ms = det.Report(uint32(pid), n)
		})
		if pod := r.URL.Query().Get("pod"); pod != "" {
			kept := ms[:0]
			for _, m := range ms {
				if slices.Contains(podOf(m.PID), pod) {
					kept = append(kept, m)
				}
			}
			ms = kept
		}
		rep := comdetect.JSON(ms, dec.Symbolize)
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	})
}

// replayComm runs ComDetective over the samples of --replay.samples (a
// perf c2c or perf mem recording, or a timer recording with user
// registers) and serves /debug/comm and pmu_comm_* from them, labelled
// with the sampler that recorded them.
func replayComm(b *build) error {
	path := b.f.replay.samples
	if path == "" {
		return fmt.Errorf("%w: no --replay.samples (the address sampler itself runs live)", errNotRecorded)
	}
	file, closeFile, err := OpenPerfData(path, nil)
	if err != nil {
		return fmt.Errorf("--replay.samples: %w", err)
	}
	defer closeFile()
	acc, err := NewAccesses(GoArch(file.Arch))
	if err != nil {
		return fmt.Errorf("--replay.samples: %w", err)
	}
	source := RecordedSampler(file.Events.Attrs, file.Names)
	r := &replayedComm{det: comdetect.New(comdetect.Options{Window: comdetect.Window(b.f.comm.window, source != "decode")}), acc: acc}
	_, _, err = EachSample(file, path, io.Discard, PerfDataVisitor{
		Record: acc.Record,
		Sample: func(i int, s *perfrecord.Sample) error {
			if a, ok := acc.Access(file.Events.Attrs[i], s); ok {
				r.det.Add(&a)
			}
			return nil
		},
	})
	if err != nil {
		acc.Close()
		return fmt.Errorf("--replay.samples: %w", err)
	}
	for k, name := range acc.Names {
		r.det.SetName(k[0], k[1], name)
	}
	b.p.closers = append(b.p.closers, acc.Close)
	b.p.collectors = append(b.p.collectors, exporter.NewComm(r).WithSource(source))
	b.p.handlers = append(b.p.handlers, Handler{"/debug/comm", "Communication matrices (?pid=N)", commHandler(r, func(uint32) []string { return nil })})
	return nil
}

// RecordedSampler names the sampler of a recording's events: decode for
// timer samples with user registers, else ibs, spe or pebs by the events.
func RecordedSampler(attrs []perfrecord.Attr, names []string) string {
	for _, a := range attrs {
		if a.SampleType&unix.PERF_SAMPLE_REGS_USER != 0 {
			return "decode"
		}
	}
	for _, n := range names {
		switch {
		case strings.Contains(n, "ibs"):
			return "ibs"
		case strings.Contains(n, "arm_spe"):
			return "spe"
		}
	}
	return "pebs"
}

// replayedComm is a recording's detector, fixed once read.
type replayedComm struct {
	det *comdetect.Detector
	acc *Accesses
}

func (r *replayedComm) View(f func(det *comdetect.Detector, out memop.Outcomes)) {
	f(r.det, r.acc.Resolver.Outcomes())
}

func (r *replayedComm) Domains(func(a, b string, c comdetect.Cell)) {} // the recording host's caches are unknown

func (r *replayedComm) Symbolize(pid uint32, ip uint64) string {
	return r.acc.Code.Symbolize(pid, ip).String()
}
