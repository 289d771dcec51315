package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/rlimit"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
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

// Pipeline is what serve exports: its collectors, the loop that feeds them,
// whether its first values are in, and what to release at the end.
type Pipeline struct {
	// parts are the exporter collectors, each with the collector that
	// built it (pmu_scrape_stale_total's part).
	parts   []part
	run     func(ctx context.Context)
	ready   func() (bool, string)
	closers []func()
	// startPods starts the pod-name informer (nil without the API).
	startPods func(ctx context.Context)
	// handlers are extra endpoints (/debug/cachelines).
	handlers []Handler
	// cpuResets hear of CPUs whose events the counting engine reopened.
	cpuResets []func(cpu int)
	// step plays one recorded interval (replay only), as run does on its
	// clock: the golden exposition test plays a fixed number.
	step func()
	// health hears of every collector's cycles (pmu_collector_*).
	health *exporter.Health
	// beside run with run until ctx ends (the sampler's reader); run
	// returns once they have, so that closers never pull a ring from under
	// its reader.
	beside []func(ctx context.Context)
	// self is what the exporter costs (live only; nil in replay).
	self *exporter.SelfCost
}

// WrapMetrics counts what each scrape of h costs the exporter (its
// process CPU time while serving it) into pmu_self_*.
func (p *Pipeline) WrapMetrics(h http.Handler) http.Handler {
	if p.self == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := perf.OwnCPU()
		h.ServeHTTP(w, r)
		p.self.AddScrape(uint64(max(perf.OwnCPU()-t0, 0)))
	})
}

// Close releases what the collectors hold, in the reverse order.
func (p *Pipeline) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// part is an exporter collector and the collector that built it.
type part struct {
	name string
	c    prometheus.Collector
}

// add exports c as part of the named collector.
func (p *Pipeline) add(name string, c prometheus.Collector) {
	p.parts = append(p.parts, part{name, c})
}

// NewRegistry holds the pipeline's collectors and the exporter's own: build
// information, the Go runtime and the process. Each collector's metrics
// are collected within timeout (exporter.Bounded; 0: unbounded, as tests
// that gather once may ask), so that a scrape never waits on a
// collector whose source is held up.
func NewRegistry(p *Pipeline, timeout time.Duration) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	stale := exporter.NewStaleScrapes()
	for _, pt := range p.parts {
		if timeout > 0 {
			reg.MustRegister(exporter.NewBounded(pt.c, pt.name, timeout, stale))
		} else {
			reg.MustRegister(pt.c)
		}
	}
	if timeout > 0 {
		reg.MustRegister(stale)
	}
	reg.MustRegister(
		versioncollector.NewCollector("pmu"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// measuring says whether any group is open on any CPU, or why none is: a
// pod that measures nothing is alive (/-/healthy) but not ready.
func measuring(s perfcount.Snapshot) (bool, string) {
	reasons := map[string]int{}
	for _, g := range s.Groups {
		if g.OpenCPUs > 0 {
			return true, ""
		}
		for r, n := range g.Failures {
			reasons[string(r)] += n
		}
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%s on %d group CPUs", r, reasons[r]))
	}
	return false, "no event group could be opened (" + cmp.Or(strings.Join(parts, ", "), "no group configured") + "); see pmu_group_open_failures and pmu_exporter check"
}

// Run feeds the collectors until ctx ends.
func (p *Pipeline) Run(ctx context.Context) { p.run(ctx) }

// Stuck names the collectors with a cycle that has run longer than bound,
// with how long (exporter.Health.Stuck): /-/healthy fails on any.
func (p *Pipeline) Stuck(bound time.Duration) map[string]time.Duration {
	if p.health == nil {
		return nil
	}
	return p.health.Stuck(time.Now(), bound)
}

// FreeFDs is how many more file descriptors the process may open now
// under its open-file limit, and that limit; false where either is not
// known or there is no limit.
func (p *Pipeline) FreeFDs() (free int64, limit uint64, ok bool) {
	limit, err := rlimit.OpenFiles()
	if err != nil || limit == rlimit.Unlimited {
		return 0, limit, false
	}
	open, err := rlimit.OpenFDs()
	if err != nil {
		return 0, limit, false
	}
	return int64(limit) - int64(open), limit, true
}

// Ready says whether the first values are in, or why not.
func (p *Pipeline) Ready() (bool, string) { return p.ready() }

// StartPods starts the pod-name informer, where there is one.
func (p *Pipeline) StartPods(ctx context.Context) {
	if p.startPods != nil {
		p.startPods(ctx)
	}
}

// Handlers are the extra endpoints (served only with --web.enable-debug).
func (p *Pipeline) Handlers() []Handler { return p.handlers }

// hasHandler says whether a collector already serves path.
func (p *Pipeline) hasHandler(path string) bool {
	for _, h := range p.handlers {
		if h.Path == path {
			return true
		}
	}
	return false
}

// Build puts the pipeline together from this host's counters, or from a
// recording with --source=replay.
func Build(o Options, logger *slog.Logger) (*Pipeline, error) {
	if o.source == "replay" {
		return replayPipeline(o, logger)
	}
	return livePipeline(o, logger), nil
}
