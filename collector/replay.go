package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
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

// replayCounting loads the recording.
func replayCounting(b *build) error {
	f, logger := b.f, b.log
	if f.replay.file == "" {
		return errors.New("--source=replay needs --replay.file")
	}
	file, err := safeopen.Input("--replay.file", f.replay.file, safeopen.Recording, nil)
	if err != nil {
		return err
	}
	defer file.Close()
	rec, err := replay.Load(f.replay.file, file)
	if err != nil {
		return err
	}
	if f.perCPU && !rec.PerCPU {
		return fmt.Errorf("--collector.counting.per-cpu: %s was recorded without perf stat -A, so it has no per-CPU values", f.replay.file)
	}
	for _, h := range rec.Header {
		logger.Info("replay file", "header", h)
	}
	if len(rec.Header) == 0 {
		logger.Warn("replay file has no header comment saying where it was recorded", "file", f.replay.file)
	}
	b.replay.rec = rec
	return nil
}

// replayTopdown compiles the recording host's tree (--replay.uarch).
func replayTopdown(b *build) error {
	f := b.f
	if f.replay.uarch == "" {
		b.log.Info("Top-Down not computed", "reason", "no --replay.uarch")
		return fmt.Errorf("%w: no --replay.uarch", errNotRecorded)
	}
	def, err := topdown.Builtin(f.replay.uarch)
	if err != nil {
		return fmt.Errorf("--replay.uarch: %w", err)
	}
	if f.tree.level > def.Levels() {
		b.log.Info("Top-Down level beyond the tree", "uarch", f.replay.uarch, "levels", def.Levels(), "asked", f.tree.level)
	}
	_, tree, _, err := pruneTree(def, f.tree.level, 0, f.tree.nodes)
	if err != nil {
		return fmt.Errorf("--collector.topdown.level, --collector.topdown.nodes: %w", err)
	}
	params := map[string]float64{}
	if tree.Input("smt_on") >= 0 {
		params["smt_on"] = map[string]float64{"on": 1, "off": 0}[f.replay.smt]
	}
	if tree.Input("#slots") >= 0 {
		if f.replay.slots <= 0 {
			return fmt.Errorf("the %s tree needs the core's slots per cycle: pass --replay.slots", f.replay.uarch)
		}
		params["#slots"] = f.replay.slots
	}
	if topdown.NeedsTSC(tree) {
		if f.replay.tscHz <= 0 {
			return fmt.Errorf("the %s tree's nodes below level 3 scale by the core frequency: pass --replay.tsc-hz (the recording host's TSC frequency) or a lower --collector.topdown.level", f.replay.uarch)
		}
		topdown.SetTSC(params, f.replay.tscHz)
	}
	b.replay.tree, b.replay.params, b.replay.uarch = tree, params, def.Name
	return nil
}

// replayCgroups plays the recording's perf stat -G cgroups.
func replayCgroups(b *build) error {
	if b.replay.rec == nil || !b.replay.rec.Cgroups {
		return fmt.Errorf("%w: recorded without perf stat -G", errNotRecorded)
	}
	b.replay.cgroups = true
	return nil
}

// replaySampling serves a perf.data file's samples (--replay.samples).
func replaySampling(b *build) error {
	if b.f.replay.samples == "" {
		return fmt.Errorf("%w: no --replay.samples", errNotRecorded)
	}
	start := time.Now()
	if err := replaySamples(b.p, b.f.replay.samples, b.f.sampling.maxLines, os.Stderr, b.log); err != nil {
		return err
	}
	if file, closeFile, err := OpenPerfData(b.f.replay.samples, nil); err == nil {
		b.replay.sampler = RecordedSampler(file.Events.Attrs, file.Names)
		closeFile()
	}
	b.sampled = time.Since(start)
	return nil
}

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
