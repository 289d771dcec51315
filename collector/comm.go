package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfsample"
	"github.com/pmu-exporter/pmu_exporter/kernel/watch"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// commEntry is the comm collector in the registry: it samples user-mode code
// with its registers and decodes the accesses: ComDetective and
// ReuseTracker; its flags (--collector.comm.*) bound to f, and its live and
// replay factories.
func commEntry(f *Options) registry.Collector[*build] {
	return registry.Collector[*build]{Name: "comm", Default: true, Needs: []string{capability.SystemWide, capability.AddressSampling}, Live: liveComm, Replay: replayComm,
		Help: "Sample user-mode code on every CPU with its registers and decode each sampled instruction's memory operand (no precise PMU needed; where PEBS, IBS or SPE exist, their memory samples instead, with the width decoded): ComDetective's communication matrices with true and false sharing (/debug/comm), and the shared-line table where no precise sampler feeds it",
		Options: func(o registry.Options) {
			o.Flag("period", "", "Nanoseconds of CPU time between the address sampler's samples on each CPU (1000000: 1 kHz); the governor raises it beyond --collector.comm.cpu-budget. Where PEBS, IBS or SPE sample instead, --collector.sampling.period sets theirs.", func(fc *kingpin.FlagClause) { flagrange.Uint64(fc, &f.comm.period, "1000000", 10_000, 60_000_000_000) })
			o.Flag("window", "", "How many of a reader's own samples a published store stays fresh for (ComDetective's expiry); "+comdetect.WindowHelp()+" (docs/sampling.md).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.comm.window, "0", 0, 1<<20) })
			o.Flag("cpu-budget", "", "CPU the exporter may spend, in CPUs (0.01: 1% of one CPU), all of its CPU time counted; beyond it the address sampler's period rises, so what the other collectors and the watchpoints cost comes out of its samples.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.comm.budget, "0.01", 0.0001, 1024) })
			o.Flag("per-cgroup", "", "Record each sample's cgroup and export pmu_cgroup_comm_sampled_seconds_total (pmu_cgroup_comm_accesses_estimated_total from precise samples) per namespace, pod and container, bounded by --collector.cgroup.max-series.", func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.comm.perCgroup) })
			o.Flag("pods", "", "Which pods' tasks to sample: all (every task, as without Kubernetes), or annotated: only pods annotated pmu-exporter.io/comm=\"true\" on this node, each with perf's cgroup mode (needs --kubernetes.node-name); others are not sampled at all.", func(fc *kingpin.FlagClause) { fc.Default("all").EnumVar(&f.comm.pods, "all", "annotated") })
			o.Flag("watchpoints", "", "Add ComDetective's trap path in the selected workloads (--collector.comm.cgroup or --collector.comm.pods=annotated): a sampled store arms the debug registers of its process's other threads on its line; a trap is a communication. Needs watchpoints that fire (check: breakpoints) and CAP_PERFMON; each trap costs the workload ~25 µs here, within --collector.comm.watch-budget.", func(fc *kingpin.FlagClause) { fc.BoolVar(&f.comm.watchpoints) })
			o.Flag("reuse", "", "Run ReuseTracker on the selected workloads' watchpoints instead (reuse time distances between a sampled access and its thread's next access to the same bytes, and invalidations by other threads' stores): pmu_reuse_*. Exclusive with --collector.comm.watchpoints.", func(fc *kingpin.FlagClause) { fc.BoolVar(&f.comm.reuse) })
			o.Flag("reuse-mode", "", "private: reuse by the sampling thread itself (its private caches); shared: by another thread of its last-level cache domain (a shared cache), stores from other domains being invalidations.", func(fc *kingpin.FlagClause) { fc.Default("private").EnumVar(&f.comm.reuseMode, "private", "shared") })
			o.Flag("reuse-own", "", "Private mode: of each watched thread's debug registers, how many watch its own sampled accesses alone (they see its next touch, not other threads' stores); the rest are global, armed in every thread, and see the invalidations. 0: all global, as the thesis (docs/sampling.md).", func(fc *kingpin.FlagClause) {
				flagrange.Int(fc, &f.comm.reuseOwn, strconv.Itoa(reuse.DefaultOwn), 0, 4)
			})
			o.Flag("reuse-clock", "", "Private reuse distances in counts of these events (perf syntax, several joined by +), counted in each watched thread's group and read at its samples and traps, instead of its CPU time; accesses: the host's loads and stores (ReuseTracker's clock: Intel MEM_INST_RETIRED.ALL_LOADS+ALL_STORES, AMD ls_dispatch, Arm MEM_ACCESS), whose distances also give LRU stack distances and miss ratios (where no such events are known for the core PMU, its retired instructions; where no core PMU counts, the CPU time, with a warning); accesses=EVENTS: events of yours that count them. Empty: the thread's CPU time.", func(fc *kingpin.FlagClause) { fc.StringVar(&f.comm.reuseClock) })
			o.Flag("watch-budget", "", "The share of a watched process's CPU time its watchpoint traps may cost it (each trap's cost measured at start); a sample of a process over budget is used without watchpoints.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.comm.watchBudget, "0.01", 0.0001, 1) })
			o.Flag("decode-cache", "", "Memory the address decoder may keep of the instructions it decoded (those sampled, each process's own), beyond which those not sampled lately are dropped and decoded again if sampled again: pmu_address_decode_cache_bytes.", func(fc *kingpin.FlagClause) {
				flagrange.Bytes(fc, &f.comm.decodeCache, "32MiB", units.KiB, 16*units.GiB)
			})
			o.Flag("symbol-cache", "", "Memory the address decoder may keep of the sampled binaries' symbol tables, DWARF line tables and Go pclntabs (a process can declare a table of any size); a table that would pass it is not read, once the binaries no process maps are closed, and the binary's code is decoded without it: pmu_address_symbol_cache_bytes, pmu_address_symbol_tables_refused_total.", func(fc *kingpin.FlagClause) {
				flagrange.Bytes(fc, &f.comm.symbolCache, "64MiB", units.MiB, 16*units.GiB)
			})
			o.Flag("max-watched-threads", "", "Threads given watchpoint events at most (each holds one fd per debug register, a task-clock and a ring).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.comm.maxWatched, "256", 1, 1<<16) })
			o.Flag("cgroup", "", "Sample only this cgroup's tasks (path below the perf_event hierarchy, as in /proc/<pid>/cgroup; repeatable), with perf's cgroup mode: other workloads are not sampled at all. Default: every task.", func(fc *kingpin.FlagClause) { fc.StringsVar(&f.comm.cgroups) })
		}}
}

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
	reuseOwn  int // private mode: each thread's registers for its own watches
	// reuseClock: events whose counts are the private distance clock
	// (perf syntax joined by +; "": the thread's CPU time).
	reuseClock string
	// decodeCache bounds the decoder's cache of decoded instructions.
	decodeCache units.Base2Bytes
	// symbolCache bounds what it keeps of the sampled binaries' tables.
	symbolCache units.Base2Bytes
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
	dec, err := newDecoder(b.f.procfs, det)
	if err != nil {
		return err
	}
	dec.SetDecodeCache(int(o.decodeCache))
	dec.SetSymbolBudget(int64(o.symbolCache))
	dec.SetDomains(llcDomains(b).Of)
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
	annotated, err := openSamplers(b, o, set, root)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, set.closeAll)
	p.cpuResets = append(p.cpuResets, set.resetCPU)
	// The watchpoint engine: where the node's flags ask for it, or where
	// annotated pods may (pmu-exporter.io/comm: watchpoints or reuse); in
	// the second case a host whose breakpoints do not work still samples
	// them, and says so.
	var engine *watch.Engine
	if set.nodeRegs != model.RegistersNone || annotated != nil {
		var err error
		engine, err = setupWatchpoints(b, dec, &o, annotated != nil)
		switch {
		case err != nil && (set.nodeRegs != model.RegistersNone || !errors.Is(err, errNoBreakpoints)):
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
	coll := commCollector(b, o, dec, det, set, source, engine != nil)
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
		p.add("comm", reuseCollector(b, o, dec, ids))
	}
	p.add("comm", coll)
	if !p.hasHandler("/debug/cachelines") { // no precise sampler: this one feeds the table
		p.add("comm", exporter.NewSampling(set, stats))
		p.handlers = append(p.handlers, Handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, func() func(uint32, uint64) string { return nil })})
	}
	p.handlers = append(p.handlers, Handler{"/debug/comm", "Communication matrices (?pid=N, ?pod=NAME)", commHandler(dec, podOfPID(b.f.procfs, b.names))})
	p.beside = append(p.beside, commBackground(b, o, dec, stats, set, cgNames, annotated, engine != nil, reuseOn))
	return nil
}

// llcDomains are this host's last-level cache domains, each CPU that sysfs
// does not place said once.
func llcDomains(b *build) *host.LLCDomains {
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
	return doms
}

// openSamplers opens one sampler on every CPU, or one per selected cgroup
// (perf's cgroup mode: only their tasks are sampled, and cost nothing
// elsewhere); with --collector.comm.pods=annotated it opens none and
// returns the pods' annotations, whose pods the samplers then follow as
// they come and go.
func openSamplers(b *build, o commFlags, set *commSamplers, root string) (podAnnotations, error) {
	var annotated podAnnotations
	switch {
	case o.pods == "annotated":
		var ok bool
		if annotated, ok = b.names.(podAnnotations); !ok || root == "" {
			return nil, errors.New("--collector.comm.pods=annotated needs the pods' annotations (--kubernetes.node-name) and a cgroup hierarchy with the perf_event controller")
		}
	case len(o.cgroups) > 0:
		if root == "" {
			return nil, errors.New("--collector.comm.cgroup: no cgroup hierarchy holds the perf_event controller")
		}
		set.budgetShare = len(o.cgroups)
		for _, cg := range o.cgroups {
			if err := set.open(cg, set.nodeRegs); err != nil {
				set.closeAll()
				return nil, fmt.Errorf("--collector.comm.cgroup: %w", err)
			}
		}
	default:
		if set.nodeRegs != model.RegistersNone {
			return nil, errors.New("watchpoints (--collector.comm.watchpoints, --collector.comm.reuse) arm every thread of what is sampled: select the workloads (--collector.comm.cgroup or --collector.comm.pods=annotated)")
		}
		if err := set.open("", model.RegistersNone); err != nil {
			return nil, err
		}
	}
	return annotated, nil
}

// commCollector exports the detections, and the watchpoints' totals where
// the engine runs (watching).
func commCollector(b *build, o commFlags, dec *feed.Decoder, det *comdetect.Detector, set *commSamplers, source string, watching bool) *exporter.CommCollector {
	coll := exporter.NewComm(dec).WithSource(source)
	if source == "decode" {
		b.log.Info("address sampler", "event", "cpu-clock:u", "period_ns", o.period, "window", det.Window(), "cgroups", len(o.cgroups), "pods", o.pods)
		coll.WithPeriods(set.periods)
	} else {
		for _, c := range set.cfgs {
			b.log.Info("address sampler: precise memory samples", "source", source, "event", c.Name, "period", c.Period, "window", det.Window(), "cgroups", len(o.cgroups), "pods", o.pods)
		}
	}
	if watching {
		coll.WithWatch(func() exporter.WatchStats {
			w := dec.WatchStats()
			g, budget, cost, ok := dec.TrapBudget()
			threads, reuseThreads := dec.WatchedThreads()
			return exporter.WatchStats{Traps: w.Traps, Unresolved: w.Unresolved, Lost: w.Lost, Arms: w.Arms, Recorded: w.Communication, Reuse: w.Reuse,
				Threads: threads, ReuseThreads: reuseThreads, Joined: w.Joined,
				Limited: ok, Budget: budget, TrapCost: cost, CPU: g.CPU, Cost: g.Spent, Denied: g.Denied}
		})
	}
	return coll
}

// reuseCollector exports ReuseTracker's distances, with miss ratios at this
// host's cache sizes where the distances are counted in accesses.
func reuseCollector(b *build, o commFlags, dec *feed.Decoder, ids exporter.CgroupIDs) *exporter.ReuseCollector {
	rc := exporter.NewReuse(dec, ids, b.names)
	if o.reuseClock == reuse.ClockAccesses && len(b.s.facts.OnlineCPUs) > 0 {
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
	return rc
}

// commBackground is what runs beside the read loop: forgetting exited
// processes, sweeping removed cgroups' totals, following the samplers (and
// the annotated pods), and giving the watchpoints the sampled cgroups'
// threads.
func commBackground(b *build, o commFlags, dec *feed.Decoder, stats *samplestat.Stats, set *commSamplers, cgNames *cgroupNames, annotated podAnnotations, watching, reuseOn bool) func(context.Context) {
	return func(ctx context.Context) {
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
		if watching {
			wg.Add(1)
			go func() {
				defer wg.Done()
				set.watchThreads(ctx, o.maxWatched)
			}()
		}
		wg.Wait()
	}
}

// errNoBreakpoints: this host's breakpoints cannot be opened, or do not
// trap.
var errNoBreakpoints = errors.New("no working watchpoints")

// setupWatchpoints opens the watchpoint engine and puts the decoder's
// algorithms on it, each where the node's flags or any pod (anyPod, the
// pods choosing by annotation) may ask for it: ComDetective's trap path,
// and ReuseTracker with its distance clock (o.reuseClock becomes the unit
// it resolves to); and the budget of the traps' cost. Errors that say
// the host has no working watchpoints wrap errNoBreakpoints; the others
// are the flags'.
func setupWatchpoints(b *build, dec *feed.Decoder, o *commFlags, anyPod bool) (*watch.Engine, error) {
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
			if s, ok := strings.CutPrefix(spec, reuse.ClockAccesses+"="); ok {
				spec, o.reuseClock = s, reuse.ClockAccesses
			} else if spec == reuse.ClockAccesses {
				// A node without them still measures reuse, on the
				// next best clock, and says so.
				var unit string
				var why error
				spec, unit, why = bestReuseClock(b.s.facts.CPU, b.s.pmus, perf.Probe)
				switch unit {
				case "":
					b.log.Warn("reuse distances on the thread's CPU time, not in accesses: no stack distances or miss ratios", "reason", why)
				case reuse.ClockAccesses:
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
		if err := dec.WatchReuse(engine, slots, o.reuseOwn, mode, o.reuseClock); err != nil {
			return nil, fmt.Errorf("--collector.comm.reuse: %w", err)
		}
	}
	if o.watchpoints || anyPod {
		if err := dec.Watch(engine, slots); err != nil {
			return nil, fmt.Errorf("--collector.comm.watchpoints: %w", err)
		}
	}
	dec.LimitTraps(o.watchBudget, cost)
	dec.WatchNewThreads(o.maxWatched)
	b.log.Info("address sampler: watchpoints in the selected workloads' threads", "per_thread", slots, "max_threads", o.maxWatched,
		"trap_cost", cost, "budget", o.watchBudget, "node", o.registers(), "pods_choose", anyPod)
	ok = true
	return engine, nil
}

// newDecoder is the address sampler's decoder, reading the processes
// under proc (kernel/perfsample.Processes) and feeding det.
func newDecoder(proc string, det *comdetect.Detector) (*feed.Decoder, error) {
	procs, err := perfsample.NewProcesses(proc)
	if err != nil {
		return nil, err
	}
	return feed.NewDecoder(procs, perfsample.MonotonicNow, det)
}

// The sampler's records go to feed's sink.
var _ perfsample.Consumer = (*feed.Sink)(nil)

// replayComm runs ComDetective over the samples of --replay.samples (a
// perf c2c or perf mem recording, or a timer recording with user
// registers) and serves /debug/comm and pmu_comm_* from them, labelled
// with the sampler that recorded them; and ReuseTracker over the access
// trace of --replay.trace (replayReuse).
func replayComm(b *build) error {
	path := b.f.replay.samples
	if b.f.replay.trace != "" {
		if err := replayReuse(b); err != nil {
			return err
		}
	}
	if path == "" {
		if b.f.replay.trace != "" {
			return nil
		}
		return fmt.Errorf("%w: no --replay.samples or --replay.trace (the address sampler itself runs live)", errNotRecorded)
	}
	file, closeFile, err := recorded.Open(path, nil)
	if err != nil {
		return fmt.Errorf("--replay.samples: %w", err)
	}
	defer closeFile()
	acc, err := recorded.NewAccesses(recorded.GoArch(file.Arch), b.f.replay.symfs)
	if err != nil {
		return fmt.Errorf("--replay.samples: %w", err)
	}
	source := recorded.Sampler(file.Events.Attrs, file.Names)
	r := &replayedComm{det: comdetect.New(comdetect.Options{Window: comdetect.Window(b.f.comm.window, source != "decode")}), acc: acc,
		domainOf: llcOf(file.Caches), domains: map[[2]string]*comdetect.Cell{}}
	// Per cgroup where the samples say theirs (perf record --all-cgroups),
	// named by the recording's cgroup records.
	var stats *samplestat.Stats
	cgroups := recordedCgroups{}
	for _, a := range file.Events.Attrs {
		if a.SampleType&unix.PERF_SAMPLE_CGROUP != 0 && stats == nil && b.f.comm.perCgroup {
			stats = samplestat.New(len(file.Events.Attrs), 1)
			stats.TrackCgroups(b.f.cgroups.maxSeries)
		}
	}
	var period periodMean
	_, _, err = recorded.EachSample(file, path, io.Discard, recorded.Visitor{
		Record: func(rec []byte, h perfrecord.Header) {
			acc.Record(rec, h)
			if h.Type == perfrecord.TypeCgroup {
				if c, err := perfrecord.DecodeCgroup(rec); err == nil {
					cgroups[c.ID] = c.Path
				}
			}
		},
		Sample: func(i int, s *perfrecord.Sample) error {
			attr := file.Events.Attrs[i]
			period.add(attr, s)
			a, ok := acc.Access(attr, s)
			if !ok {
				return nil
			}
			found := r.det.Add(&a)
			r.fold(a.CPU, found, a.Period)
			if stats != nil && attr.SampleType&unix.PERF_SAMPLE_CGROUP != 0 {
				batch := stats.Lock()
				batch.Detected(&a, s.Cgroup, true, found.Kind)
				batch.Unlock()
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
	coll := exporter.NewComm(r).WithSource(source)
	if source == "decode" && period.n > 0 {
		// The timer's period, as live: what a sample stands for, in ns.
		ns := uint64(period.sum / float64(period.n))
		coll.WithPeriods(func() map[string]uint64 { return map[string]uint64{"": ns} })
	}
	if stats != nil {
		coll.PerCgroup(stats, cgroups, nil)
	}
	b.p.closers = append(b.p.closers, acc.Close)
	b.p.add("comm", coll)
	b.p.handlers = append(b.p.handlers, Handler{"/debug/comm", "Communication matrices (?pid=N)", commHandler(r, func(uint32) []string { return nil })})
	return nil
}
