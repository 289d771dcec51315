package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podmeta"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// build is the pipeline while the collectors' factories put it together,
// in registry order: each adds its groups, its step after every read, its
// exporter collectors and its closers, and may use what earlier ones built.
type build struct {
	f   *Options
	log *slog.Logger
	s   *setup
	p   *Pipeline
	// online is the one reader of the online CPUs (engine, attribution,
	// perf cgroup mode and sampler share it).
	online *host.OnlineCPUsReader
	// hotplug hears CPUs go online and offline (nil where the uevent
	// socket cannot be opened: hotplug is then followed at each read).
	hotplug *cpuhotplug.Listener
	engine  perfcount.Options // the counting engine's groups and hooks
	steps   []step            // what runs after every read, in collector order
	resets  []func(cpu int, cause string)
	td      *liveTopdown      // Top-Down's trees, also computed per cgroup
	names   exporter.PodNames // pod names from the API (nil without it)
	// replay only: the recording and the tree it is played through, and
	// how long reading --replay.samples took.
	replay  *replayBuild
	sampled time.Duration
}

// hotplugEvents subscribes to the CPU hotplug events until the returned
// function is called: nil without the listener (a nil channel never
// delivers).
func (b *build) hotplugEvents() (<-chan cpuhotplug.Event, func()) {
	if b.hotplug == nil {
		return nil, func() {}
	}
	return b.hotplug.Subscribe()
}

// step is a collector's work after each read, timed into its health.
type step struct {
	collector string
	run       func(snap model.Snapshot) error
}

// livePipeline counts with perf_event_open on this host: every enabled
// collector that the host allows, each missing piece logged with its reason
// and reported as pmu_collector_success 0.
func livePipeline(f Options, logger *slog.Logger) *Pipeline {
	raiseMemlock(logger, host.HoldsCap(f.procfs, host.CapIPCLock))
	s := discover(f)
	b := &build{f: &f, log: logger, s: &s, p: &Pipeline{}, online: host.NewOnlineCPUsReader(f.sysfs)}
	b.p.closers = append(b.p.closers, func() { b.online.Close() })
	if !f.hotplugUevents {
		logger.Info("CPU hotplug is followed at each read only (--no-collector.counting.hotplug-uevents)")
	} else if l, err := cpuhotplug.Listen(); err != nil {
		logger.Info("CPU hotplug is followed at each read only: a CPU that comes online counts from the next", "err", err)
	} else {
		b.hotplug = l
		b.p.beside = append(b.p.beside, func(ctx context.Context) {
			if err := l.Run(ctx); err != nil {
				logger.Warn("no longer hearing CPU hotplug uevents; followed at each read only", "err", err)
			}
		})
		b.p.closers = append(b.p.closers, func() { l.Close() })
	}
	running, failed := f.collectors.Build(b, false)
	if !f.collectors.Enabled("cgroup") {
		// Say why pmu_capability{feature="cgroup_attribution"} is 0.
		_, feat, _ := setupCgroups(f.cgroups, s, nil, nil, logger)
		s.report.Features = append(s.report.Features, feat)
		logger.Warn("per-cgroup attribution not running", "reason", feat.Reason, "fix", feat.Fix)
	}
	var unavailable []string
	for _, c := range f.collectors.Collectors() { // each factory has said why, once
		switch err := failed[c.Name]; {
		case err == nil:
		case registry.IsUnavailable(err):
			logger.Debug("collector unavailable on this host; pmu_collector_available is 0", "collector", c.Name, "reason", err)
			unavailable = append(unavailable, c.Name)
		default:
			logger.Debug("collector not running; pmu_collector_success is 0", "collector", c.Name, "reason", err)
			running = append(running, c.Name)
		}
	}
	b.p.health = exporter.NewHealth(running...)
	b.p.health.SetUnavailable(unavailable...)
	b.p.add("exporter", b.p.health)
	b.p.self = exporter.NewSelfCost()
	b.p.add("exporter", b.p.self)
	b.calibrateReads()
	if f.validateOnStart {
		b.validateOnStart()
	}
	b.startEngine()
	return b.p
}

// liveCounting reports what the host allows and plans the counted groups;
// the engine itself starts once every collector has added its groups and
// hooks (startEngine).
func liveCounting(b *build) error {
	for _, feat := range b.s.report.Features {
		if feat.Available {
			b.log.Info("capability available", "feature", feat.Name, "detail", feat.Detail)
		} else {
			b.log.Warn("capability missing", "feature", feat.Name, "reason", feat.Reason, "fix", feat.Fix)
		}
	}
	for _, n := range b.s.report.Notes {
		b.log.Warn(n)
	}
	for _, e := range b.s.configErrors {
		b.log.Error("configuration problem; the group is not counted", "err", e)
	}
	return nil
}

// liveTopdownCollector adds the Top-Down trees' groups and their evaluation
// after each read.
func liveTopdownCollector(b *build) error {
	td, err := setupTopdown(b.f.tree, b.f.sysfs, *b.s)
	var userErr *metric.UserError
	switch {
	case errors.As(err, &userErr):
		// A broken --collector.topdown.definitions is a configuration error, as a bad
		// --config.file is: said at ERROR, counted in pmu_config_errors.
		b.log.Error("Top-Down not computed: the definitions file is not usable", "err", err)
		b.s.configErrors = append(b.s.configErrors, err)
		return err
	case err != nil:
		b.log.Info("Top-Down not computed", "reason", err)
		return err
	}
	for _, t := range td.trees {
		b.log.Info("Top-Down computed", "tree", t.Info.Uarch, "from", t.Info.Source, "smt", t.Info.SMT)
	}
	for _, w := range td.warnings {
		b.log.Warn("Top-Down group does not fit the counters; its events will be multiplexed", "problem", w)
	}
	b.s.groups = append(b.s.groups, td.groups...)
	b.td = td
	b.steps = append(b.steps, step{"topdown", func(snap model.Snapshot) error {
		for _, l := range td.lives {
			l.Update(snap)
		}
		return nil
	}})
	b.p.add("topdown", exporter.NewTopdown(td.trees, b.f.perCPU))
	return nil
}

// liveCgroup attributes the counted events (and Top-Down) to cgroups with
// the eBPF program, or with perf's cgroup mode for the allow-listed cgroups
// where eBPF cannot run; pod names come from the API when it is reachable.
func liveCgroup(b *build) error {
	f, logger := b.f, b.log
	attributor, feat, notes := setupCgroups(f.cgroups, *b.s, b.td, b.s.groups, logger)
	b.s.report.Features = append(b.s.report.Features, feat)
	for _, n := range notes {
		logger.Warn("per-cgroup attribution is partial", "problem", n)
	}
	var perfMode *cgroupcount.PerfMode
	switch {
	case attributor != nil:
		logger.Info("per-cgroup attribution", "detail", feat.Detail)
		b.p.closers = append(b.p.closers, func() { attributor.Close() }) // after the engine has closed its groups
		b.engine.OnOpen, b.engine.OnClose = attributor.kernel.OnOpen, attributor.kernel.OnClose
		b.resets = append(b.resets, func(cpu int, _ string) { attributor.kernel.ResetCPU(cpu) })
		b.steps = append(b.steps, step{"cgroup", func(model.Snapshot) error {
			cpus, err := b.online.Read()
			if err != nil {
				return err
			}
			return newErrors(attributor.Snapshot, func() { attributor.Cycle(cpus) })
		}})
	case len(f.cgroups.perfMode) > 0:
		logger.Warn("per-cgroup attribution not running", "reason", feat.Reason, "fix", feat.Fix)
		pm, err := setupPerfMode(f.cgroups, *b.s, b.s.groups, perfcount.Options{OnlineCPUs: b.online.Read, Logger: logger})
		if err != nil {
			logger.Error("perf cgroup mode not running", "err", err)
			return err
		}
		perfMode = pm
		b.p.closers = append(b.p.closers, func() { pm.Close() })
		logger.Warn("counting the allow-listed cgroups with perf's cgroup mode instead: one fd per event per CPU per cgroup; see pmu_cgroup_perf_mode_fds", "cgroups", len(f.cgroups.perfMode))
		b.resets = append(b.resets, pm.ResetCPU)
		b.steps = append(b.steps, step{"cgroup", func(model.Snapshot) error { return newErrors(pm.Snapshot, pm.Cycle) }})
	default:
		logger.Warn("per-cgroup attribution not running", "reason", feat.Reason, "fix", feat.Fix)
		return errors.New(feat.Reason)
	}
	if f.k8sNode != "" {
		client, err := podmeta.Client(f.kubeconfig)
		if err != nil {
			logger.Warn("no pod names from the Kubernetes API; cgroup series carry pod UIDs and container IDs", "err", err)
		} else {
			pods := podmeta.New(client, f.k8sNode, logger)
			b.p.startPods = func(ctx context.Context) { go pods.Run(ctx) }
			b.names = pods // set only here: a nil *podmeta.Index must stay a nil interface
			b.p.add("cgroup", exporter.NewPodMeta(pods))
		}
	}
	if perfMode != nil {
		b.p.add("cgroup", exporter.NewCgroup(perfMode, b.names, exporter.PerfCgroupMode))
	} else {
		b.p.add("cgroup", exporter.NewCgroup(attributor, b.names, exporter.AttributedByBPF))
	}
	return nil
}

// liveSampling samples memory accesses (and any --collector.sampling.event).
func liveSampling(b *build) error {
	hotplug, _ := b.hotplugEvents() // for the pipeline's life
	return setupSampling(b.p, b.f.sampling, b.f.cgroups, b.f.procfs, *b.s, b.names, b.online, hotplug, b.log)
}

// startEngine starts the counting engine with every collector's groups and
// hooks: after each read, the collectors' steps in order, each timed into its
// health; a CPU found dead is reopened by every user of per-CPU events.
func (b *build) startEngine() {
	p, f := b.p, b.f
	readDuration := exporter.NewReadDurationHistogram()
	var engine *perfcount.Engine
	var read time.Duration // the latest read cycle's
	opts := b.engine
	opts.Groups, opts.OnlineCPUs, opts.Logger = b.s.groups, b.online.Read, b.log
	opts.Hotplug, _ = b.hotplugEvents() // for the pipeline's life
	opts.ObserveRead = func(seconds float64) {
		readDuration.Observe(seconds)
		read = time.Duration(seconds * float64(time.Second))
	}
	opts.AfterCycle = func() {
		snap := engine.Snapshot()
		var err error
		if ok, why := measuring(snap); !ok {
			err = errors.New(why)
		}
		p.health.Observe("counting", read, err)
		for _, st := range b.steps {
			p.health.Time(st.collector, func() error { return st.run(snap) })
		}
	}
	// A cycle that never ends (a read hung in the kernel) fails
	// /-/healthy (Pipeline.Stuck).
	opts.AroundCycle = func(work func()) {
		end := p.health.Begin("counting")
		defer end()
		work()
	}
	if p.self != nil {
		var own *selftest.ThreadCounters
		tried := false
		counted := opts.AroundCycle
		opts.AroundCycle = func(work func()) {
			if !tried { // on the reading thread, which Run keeps
				tried = true
				var err error
				if own, err = selftest.OpenThreadCounters(); err != nil {
					b.log.Info("the read cycles' own cost is not counted", "err", err)
				}
			}
			if own == nil {
				counted(work)
				return
			}
			a, err := own.Read()
			counted(work)
			z, err2 := own.Read()
			if err == nil && err2 == nil {
				p.self.AddRead(z.TaskClock-a.TaskClock, z.Instructions-a.Instructions, z.Cycles-a.Cycles, z.HasInstructions, z.HasCycles)
			}
		}
		p.closers = append(p.closers, func() {
			if own != nil {
				own.Close()
			}
		})
	}
	opts.OnCPUReset = func(cpu int, cause string) {
		for _, r := range b.resets {
			r(cpu, cause)
		}
		for _, r := range p.cpuResets {
			r(cpu)
		}
	}
	engine = perfcount.New(opts)
	p.run = func(ctx context.Context) { runBeside(ctx, p.beside, func() { engine.Run(ctx, f.interval) }) }
	p.ready = func() (bool, string) {
		// The first cycle opens the groups, the second reads the first values.
		if engine.Cycles() < 2 {
			return false, "no counts have been read yet"
		}
		return measuring(engine.Snapshot())
	}
	p.add("counting", exporter.New(engine, b.s.report, exporter.Options{PerCPU: f.perCPU, ConfigErrors: len(b.s.configErrors), Source: "perf_event"}))
	p.add("counting", readDuration)
}

// runBeside runs main and every one of beside until ctx ends, and returns
// when all have.
func runBeside(ctx context.Context, beside []func(context.Context), main func()) {
	var wg sync.WaitGroup
	for _, r := range beside {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r(ctx)
		}()
	}
	main()
	wg.Wait()
}

// newErrors runs a cycle of a per-cgroup source, which counts its failures
// rather than returning them, and says whether it counted new ones.
func newErrors(snapshot func() model.CgroupSnapshot, cycle func()) error {
	sum := func() (n uint64) {
		for _, v := range snapshot().Errors {
			n += v
		}
		return n
	}
	before := sum()
	cycle()
	if after := sum(); after > before {
		return fmt.Errorf("%d failures, by reason in pmu_cgroup_attribution_errors_total", after-before)
	}
	return nil
}
