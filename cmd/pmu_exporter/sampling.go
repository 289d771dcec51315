package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/collectors/perfsample"
	"github.com/pmu-exporter/pmu_exporter/collectors/procmaps"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/samplestat"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// samplingFlags are serve's --sampling.* options.
type samplingFlags struct {
	enabled  bool
	events   []string
	period   uint64
	ldlat    uint64
	budget   float64
	pages    int
	maxLines int
}

// setupSampling opens the host's memory sampling events and the user's,
// and adds their collector and /debug/cachelines to p; where nothing can
// be sampled it says why and leaves p alone.
func setupSampling(p *pipeline, f flags, s setup, logger *slog.Logger) {
	if !f.sampling.enabled {
		return
	}
	cfgs, missing, err := sampling.Plan(s.pmus, sampling.Options{Period: f.sampling.period, LdLat: f.sampling.ldlat, Events: f.sampling.events})
	if err != nil {
		logger.Error("sampling not running", "err", err)
		return
	}
	for _, m := range missing {
		logger.Warn("memory sampling not available", "what", m.What, "reason", m.Why)
	}
	if len(cfgs) == 0 {
		return
	}
	stats := samplestat.New(len(cfgs), f.sampling.maxLines)
	smp, failures, err := perfsample.Open(cfgs, s.facts.OnlineCPUs, stats, perfsample.Options{
		Pages: f.sampling.pages, Poll: 250 * time.Millisecond, Govern: time.Second,
		Governor: sampling.NewGovernor(f.sampling.budget, s.facts.MaxSampleRate),
	})
	for _, fl := range failures {
		logger.Warn("sampling event not opened", "event", fl.Event, "cpu", fl.CPU, "err", fl.Err)
	}
	if err != nil {
		logger.Error("sampling not running", "err", err)
		return
	}
	for _, c := range smp.Configs() {
		logger.Info("sampling", "event", c.Name, "pmu", c.PMU, "period", c.Period, "memory", c.Memory)
	}
	p.collectors = append(p.collectors, exporter.NewSampling(smp, stats))
	p.closers = append(p.closers, func() { smp.Close() })
	inner := p.run
	p.run = func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := smp.Run(ctx); err != nil {
				logger.Error("sampling stopped", "err", err)
			}
		}()
		inner(ctx)
		wg.Wait() // the rings are unmapped only once their reader is done
	}
	fs, err := procfs.NewFS(f.procfs)
	if err != nil {
		logger.Warn("/debug/cachelines will not name mappings", "err", err)
	}
	p.handlers = append(p.handlers, handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, fs, err == nil)})
}

// handler is an extra HTTP endpoint of a pipeline.
type handler struct {
	path, title string
	h           http.Handler
}

// cachelinesHandler serves the hottest shared cache lines as JSON, ?n=
// of them (default 20, at most 1000), their mappings named from
// /proc/<pid>/maps.
func cachelinesHandler(stats *samplestat.Stats, fs procfs.FS, named bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 20
		if v := r.URL.Query().Get("n"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 1 || k > 1000 {
				http.Error(w, "n: want a number of lines from 1 to 1000, got "+strconv.Quote(v), http.StatusBadRequest)
				return
			}
			n = k
		}
		var name func(uint32, uint64) string
		if named {
			name = procmaps.Namer(fs)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(stats.Cachelines(n, name))
	})
}
