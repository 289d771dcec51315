package collector

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/replay"
)

// replayFlags are serve's --replay.* options.
type replayFlags struct {
	file, uarch, smt string
	slots            float64
	tscHz            float64
	samples          string
	// symfs is where the code of samples' timer samples is read.
	symfs string
	// validation is `pmu_exporter validate --format json`'s output on the
	// recording host.
	validation string
	// trace is an access trace whose ReuseTracker outcomes are served,
	// each thread sampled every tracePeriod accesses.
	trace       string
	tracePeriod uint64
	// trapCost, where above 0, governs trace's watchpoints as live at
	// this cost a trap.
	trapCost time.Duration
	// self holds scrapes of the recording host's exporter, whose own eBPF
	// families are served.
	self string
}

// replayPipeline plays a perf stat recording through the exporter's
// collectors: the same families as live, with pmu_info{source="replay"}.
// Every collector's Replay factory runs in registry order; an error other
// than errNotRecorded is a bad recording or flag, and fatal.
func replayPipeline(f Options, logger *slog.Logger) (*Pipeline, error) {
	b := &build{f: &f, log: logger, p: &Pipeline{}, replay: &replayBuild{}}
	running, failed := f.collectors.Build(b, true)
	var unrecorded []string
	for _, c := range f.collectors.Collectors() { // in order: the first error is the one to report
		switch err := failed[c.Name]; {
		case err == nil:
		case errors.Is(err, errNotRecorded):
			unrecorded = append(unrecorded, c.Name)
		default:
			b.p.Close()
			return nil, err
		}
	}
	if f.replay.validation != "" {
		if err := b.replayValidation(f.replay.validation); err != nil {
			b.p.Close()
			return nil, err
		}
	}
	if f.replay.self != "" {
		if err := b.replaySelf(f.replay.self); err != nil {
			b.p.Close()
			return nil, err
		}
	}
	b.startReplay(running, unrecorded)
	return b.p, nil
}

// replayBuild is what the replay factories gather before the player starts.
type replayBuild struct {
	rec     *replay.Recording
	tree    *metric.Tree
	params  map[string]float64
	uarch   string
	cgroups bool
	// platform: the recording has platform PMU events (replayPlatform).
	platform bool
	sampler  string // of --replay.samples: pebs, ibs, spe or decode
}

// errNotRecorded marks a collector that has nothing to play from this
// recording and these Options (no tree named, no cgroup column, no samples).
var errNotRecorded error = &registry.UnavailableError{Reason: "nothing to replay"}

// startReplay builds the player over what the factories gathered; it plays
// counting, Top-Down and cgroups at each recorded interval, and they report
// their health together.
func (b *build) startReplay(running, unrecorded []string) {
	f, p, r := b.f, b.p, b.replay
	report := capability.Report{CorePMU: f.replay.uarch, Features: recordedFeatures(r.rec, b.replay.sampler)}
	player := replay.NewPlayer(r.rec, r.tree, r.params)
	if r.tree != nil {
		p.add("topdown", exporter.NewTopdown([]exporter.TopdownTree{{Src: player.Topdown(),
			Info: exporter.TopdownInfo{Uarch: r.uarch, Source: "replay", SMT: f.replay.smt}}}, f.perCPU))
	}
	p.add("counting", exporter.New(player, report, exporter.Options{PerCPU: f.perCPU, Source: "replay"}))
	if r.platform {
		view := player.Platform()
		p.add("platform", exporter.NewPlatform(view, view.PackageOf).WithMemoryPeak(f.memoryPeak))
	}
	if cg := player.Cgroups(); r.cgroups && cg != nil {
		p.add("cgroup", exporter.NewCgroup(cg, cg, exporter.Recorded))
	}
	b.log.Warn("serving a recording, not this host's counters", "file", f.replay.file, "intervals", len(r.rec.Intervals), "per_cpu", r.rec.PerCPU, "cgroups", r.rec.Cgroups)
	readDuration := exporter.NewReadDurationHistogram()
	p.health = exporter.NewHealth(running...)
	p.health.SetUnavailable(unrecorded...)
	p.add("counting", readDuration)
	p.add("exporter", p.health)
	if slices.Contains(running, "sampling") {
		p.health.Observe("sampling", b.sampled, nil) // read once, at start
	}
	played := slices.DeleteFunc(slices.Clone(running), func(n string) bool { return n == "sampling" })
	healthy := func(d time.Duration) {
		for _, n := range played {
			p.health.Observe(n, d, nil)
		}
	}
	p.run = func(ctx context.Context) {
		player.Run(ctx, func(seconds float64) {
			readDuration.Observe(seconds)
			healthy(time.Duration(seconds * float64(time.Second)))
		})
	}
	p.step = func() {
		start := time.Now()
		player.Step()
		healthy(time.Since(start))
	}
	p.ready = func() (bool, string) { return player.Cycles() >= 1, "no recorded interval has been played yet" }
}
