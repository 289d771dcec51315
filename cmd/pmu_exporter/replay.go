package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/registry"
	"github.com/pmu-exporter/pmu_exporter/replay"
	"github.com/pmu-exporter/pmu_exporter/topdown"
)

// replayFlags are serve's --replay.* options.
type replayFlags struct {
	file, uarch, smt string
	slots            float64
	samples          string
}

// replayPipeline plays a perf stat recording through the exporter's
// collectors: the same families as live, with pmu_info{source="replay"}.
func replayPipeline(f flags, logger *slog.Logger) (*pipeline, error) {
	if f.replay.file == "" {
		return nil, errors.New("--source=replay needs --replay.file")
	}
	file, err := os.Open(f.replay.file)
	if err != nil {
		return nil, fmt.Errorf("--replay.file: %w", err)
	}
	defer file.Close()
	rec, err := replay.Load(f.replay.file, file)
	if err != nil {
		return nil, err
	}
	if f.perCPU && !rec.PerCPU {
		return nil, fmt.Errorf("--collector.counting.per-cpu: %s was recorded without perf stat -A, so it has no per-CPU values", f.replay.file)
	}
	for _, h := range rec.Header {
		logger.Info("replay file", "header", h)
	}
	if len(rec.Header) == 0 {
		logger.Warn("replay file has no header comment saying where it was recorded", "file", f.replay.file)
	}
	report := capability.Report{CorePMU: f.replay.uarch}
	p := &pipeline{}
	var player *replay.Player
	if f.replay.uarch == "" {
		player = replay.NewPlayer(rec, nil, nil)
		logger.Info("Top-Down not computed", "reason", "no --replay.uarch")
	} else {
		def, err := topdown.Builtin(f.replay.uarch)
		if err != nil {
			return nil, fmt.Errorf("--replay.uarch: %w", err)
		}
		tree, err := def.Compile()
		if err != nil {
			return nil, err
		}
		params := map[string]float64{}
		if tree.Input("smt_on") >= 0 {
			params["smt_on"] = map[string]float64{"on": 1, "off": 0}[f.replay.smt]
		}
		if tree.Input("#slots") >= 0 {
			if f.replay.slots <= 0 {
				return nil, fmt.Errorf("the %s tree needs the core's slots per cycle: pass --replay.slots", f.replay.uarch)
			}
			params["#slots"] = f.replay.slots
		}
		player = replay.NewPlayer(rec, tree, params)
		p.collectors = append(p.collectors, exporter.NewTopdown([]exporter.TopdownTree{{Src: player.Topdown(),
			Info: exporter.TopdownInfo{Uarch: def.Name, Source: "replay", SMT: f.replay.smt}}}, f.perCPU))
	}
	p.collectors = append(p.collectors, exporter.New(player, report, exporter.Options{PerCPU: f.perCPU, Source: "replay"}))
	if cg := player.Cgroups(); cg != nil {
		p.collectors = append(p.collectors, exporter.NewCgroup(cg, cg, exporter.Recorded))
	}
	logger.Warn("serving a recording, not this host's counters", "file", f.replay.file, "intervals", len(rec.Intervals), "per_cpu", rec.PerCPU, "cgroups", rec.Cgroups)
	readDuration := exporter.NewReadDurationHistogram()
	p.collectors = append(p.collectors, readDuration)
	// The player is the counting collector, and computes Top-Down as it
	// plays.
	running := []string{"counting"}
	if f.replay.uarch != "" {
		running = append(running, "topdown")
	}
	p.health = registry.NewHealth(running...)
	p.collectors = append(p.collectors, p.health)
	healthy := func(d time.Duration) {
		for _, n := range running {
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
	if f.replay.samples != "" {
		if err := replaySamples(p, f.replay.samples, f.sampling.maxLines, os.Stderr, logger); err != nil {
			return nil, err
		}
	}
	return p, nil
}
