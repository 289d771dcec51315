package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfsample"
	"github.com/pmu-exporter/pmu_exporter/kernel/procmaps"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// samplingEntry is the sampling collector in the registry: it samples memory
// accesses with the precise PMU; its flags (--collector.sampling.*) bound to
// f, and its live and replay factories.
func samplingEntry(f *Options) registry.Collector[*build] {
	return registry.Collector[*build]{Name: "sampling", Default: true, Live: liveSampling, Replay: replaySampling,
		Help: "Sample memory accesses with the host's precise PMU (Intel PEBS mem-loads and mem-stores, AMD IBS op, Arm SPE) and any --collector.sampling.event: data sources, load latency, lost samples and shared cache lines",
		Options: func(o registry.Options) {
			o.Flag("sharing-window", "sampling.sharing-window", "How long after a thread's latest sampled access to a cache line its bytes still make another thread's access to the line sharing (0: as long as the line is held, as perf c2c over a recording).", func(fc *kingpin.FlagClause) { flagrange.Duration(fc, &f.sampling.sharingWindow, "1s", 0, time.Hour) })
			o.Flag("per-cgroup", "sampling.per-cgroup", "Record each sample's cgroup (PERF_SAMPLE_CGROUP, Linux 5.7) and export pmu_cgroup_* sampling series, bounded by --collector.cgroup.max-series.", func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.sampling.perCgroup) })
			o.Flag("event", "sampling.event", "Also sample this event (perf syntax; repeatable), e.g. page-faults: its samples are counted in pmu_sampling_samples_total.", func(fc *kingpin.FlagClause) { fc.StringsVar(&f.sampling.events) })
			o.Flag("period", "sampling.period", "Initial sampling period of every sampling event (events per sample); the governor raises it when samples cost too much, and never sets it lower.", func(fc *kingpin.FlagClause) { flagrange.Uint64(fc, &f.sampling.period, "10007", 1, 1<<40) })
			o.Flag("ldlat", "sampling.ldlat", "Intel PEBS load latency threshold in core cycles: loads faster than it are not sampled.", func(fc *kingpin.FlagClause) { flagrange.Uint64(fc, &f.sampling.ldlat, "30", 1, 65535) })
			o.Flag("cpu-budget", "sampling.cpu-budget", "CPU the exporter may spend on sampling, in CPUs (0.01: 1% of one CPU); periods rise beyond it, as they do beyond half of perf_event_max_sample_rate.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.sampling.budget, "0.01", 0.0001, 1024) })
			o.Flag("ring-pages", "sampling.ring-pages", "Data pages of each CPU's sampling ring buffer (a power of two).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.sampling.pages, "16", 1, 1<<16) })
			o.Flag("spe", "sampling.spe", "Sample with Arm SPE where the host has it: the sampling collector, or the comm collector where the sampling collector is off. SPE admits one event per CPU, system-wide: while the exporter holds it, perf record -e arm_spe_0// and other SPE users get EBUSY; --no-collector.sampling.spe leaves it to them.", func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.sampling.spe) })
			o.Flag("aux-kib", "sampling.aux-kib", "Each CPU's Arm SPE AUX area in KiB (rounded up to a power of two pages): the records it holds until the exporter reads them; a full area stops the event until then (pmu_sampling_aux_lost_total{reason=\"truncated\"}).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.sampling.auxKiB, "256", 4, 1<<20) })
			o.Flag("max-lines", "sampling.max-lines", "Cache lines the shared-line table holds (/debug/cachelines); the coldest half is dropped when full.", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.sampling.maxLines, "1024", 2, 1<<24) })
		}}
}

// samplingFlags are serve's --sampling.* options.
type samplingFlags struct {
	enabled   bool
	perCgroup bool
	events    []string
	period    uint64
	ldlat     uint64
	budget    float64
	pages     int
	auxKiB    int  // each CPU's Arm SPE AUX area
	spe       bool // sample with Arm SPE where the host has it
	maxLines  int
	// sharingWindow is how long a thread's bytes on a line count.
	sharingWindow time.Duration
}

// noSPE is why the sampling collector leaves Arm SPE alone.
const noSPE = "--no-collector.sampling.spe: left to other tools (Arm SPE admits one user per CPU)"

// setupSampling opens the host's memory sampling events and the user's,
// and adds their collector and /debug/cachelines to p; where nothing can
// be sampled it says why and leaves p alone.
func setupSampling(p *Pipeline, o samplingFlags, cg cgroupFlags, procPath string, s setup, names exporter.PodNames, online *host.OnlineCPUsReader, hotplug <-chan cpuhotplug.Event, logger *slog.Logger) error {
	root, v1 := cgroupRoot(cg, s)
	perCgroup := o.perCgroup && root != ""
	if o.perCgroup && root == "" {
		logger.Warn("sampling: no per-cgroup series", "reason", "no cgroup hierarchy holds the perf_event controller")
	}
	cfgs, missing, err := sampling.Plan(s.pmus, sampling.Options{Period: o.period, LdLat: o.ldlat, Events: o.events, Cgroup: perCgroup,
		NoSPE: !o.spe, Why: noSPE})
	if err != nil {
		logger.Error("sampling not running", "err", err)
		return err
	}
	for _, m := range missing {
		logger.Warn("memory sampling not available", "what", m.What, "reason", m.Why)
	}
	if len(cfgs) == 0 && len(o.events) == 0 {
		return registry.Unavailable("no precise memory sampling here and no --collector.sampling.event")
	}
	if len(cfgs) == 0 {
		return errors.New("none of --collector.sampling.event could be planned here")
	}
	stats := samplestat.New(len(cfgs), o.maxLines)
	stats.SetSharingWindow(o.sharingWindow)
	if perCgroup {
		stats.TrackCgroups(cg.maxSeries)
	}
	smp, failures, err := perfsample.Open(cfgs, s.facts.OnlineCPUs, feed.NewSink(stats, nil), perfsample.Options{
		Logger: logger, OnlineCPUs: online.Read, Hotplug: hotplug, Pages: o.pages, Poll: 250 * time.Millisecond, Govern: 500 * time.Millisecond,
		MIDR: s.midr, AuxBytes: o.auxKiB << 10, CgroupOf: taskCgroups(procPath, root, v1, logger),
		Governor: sampling.NewGovernor(o.budget, s.facts.MaxSampleRate),
		// A skipped record is counted in pmu_sampling_errors_total; the pass
		// still succeeded.
		AfterRead: func(took time.Duration, _ int) { p.health.Observe("sampling", took, nil) },
		BeginPass: func() func() { return p.health.Begin("sampling") },
	})
	for _, fl := range failures {
		logger.Warn("sampling event not opened", "event", fl.Event, "cpu", fl.CPU, "err", fl.Err)
	}
	if err != nil {
		logger.Error("sampling not running", "err", err)
		return err
	}
	for _, c := range smp.Configs() {
		logger.Info("sampling", "event", c.Name, "pmu", c.PMU, "period", c.Period, "memory", c.Memory)
	}
	coll := exporter.NewSampling(smp, stats)
	var cgNames *cgroupNames
	if perCgroup {
		cgNames = &cgroupNames{r: cgroupid.New(root), gone: map[uint64]time.Time{}}
		coll.PerCgroup(cgNames, names)
	}
	p.add("sampling", coll)
	p.closers = append(p.closers, func() { smp.Close() })
	p.cpuResets = append(p.cpuResets, smp.ResetCPU)
	p.beside = append(p.beside, func(ctx context.Context) {
		var wg sync.WaitGroup
		if cgNames != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cgNames.sweepEvery(ctx, cg.grace, statsTotals(stats))
			}()
		}
		if err := smp.Run(ctx); err != nil {
			logger.Error("sampling stopped", "err", err)
			p.health.Observe("sampling", 0, err)
		}
		wg.Wait()
	})
	namer := func() func(uint32, uint64) string { return nil }
	if fs, err := procfs.NewFS(procPath); err != nil {
		logger.Warn("/debug/cachelines will not name mappings", "err", err)
	} else {
		namer = func() func(uint32, uint64) string { return procmaps.Namer(fs) }
	}
	p.handlers = append(p.handlers, Handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, namer)})
	return nil
}

// cgroupNames resolves the cgroup ids of samples by walking the hierarchy,
// again when an id is unknown but at most every ten seconds, so that a
// stream of samples from a cgroup that is gone does not walk each scrape.
type cgroupNames struct {
	mu   sync.Mutex
	r    *cgroupid.Resolver
	last time.Time
	gone map[uint64]time.Time // cgroups with totals not found by the last walks, since when
}

// sweepEvery walks the hierarchy every minute (or grace, if shorter) and
// forgets the totals of cgroups gone for longer than grace, as the counting
// side does with --collector.cgroup.grace-period, so that pods that come and go do
// not fill --collector.cgroup.max-series for good.
func (c *cgroupNames) sweepEvery(ctx context.Context, grace time.Duration, holders ...cgroupTotals) {
	t := time.NewTicker(min(time.Minute, max(grace, time.Second)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.sweepOnce(now, grace, holders...)
		}
	}
}

// cgroupTotals is what holds totals per cgroup id (samplestat.Stats, the
// decoder's reuse trackers of processes gone): the ids it holds, and
// forgetting some.
type cgroupTotals struct {
	ids    func() []uint64
	forget func([]uint64)
}

// sweepOnce forgets, in every holder, the cgroups any of them holds that
// have been gone for longer than grace at now. One sweep over the union:
// the gone-since times are kept per id, whichever holder has it.
func (c *cgroupNames) sweepOnce(now time.Time, grace time.Duration, holders ...cgroupTotals) {
	var ids []uint64
	for _, h := range holders {
		ids = append(ids, h.ids()...)
	}
	slices.Sort(ids)
	forget := c.sweep(slices.Compact(ids), now, grace)
	if len(forget) == 0 {
		return
	}
	for _, h := range holders {
		h.forget(forget)
	}
}

// statsTotals are samplestat's per-cgroup totals as cgroupTotals.
func statsTotals(s *samplestat.Stats) cgroupTotals {
	return cgroupTotals{s.CgroupIDs, s.ForgetCgroups}
}

// sweep walks the hierarchy and returns which of ids have been gone for
// longer than grace at now.
func (c *cgroupNames) sweep(ids []uint64, now time.Time, grace time.Duration) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.r.Walk(); err != nil {
		return nil // an unreadable hierarchy says nothing about what is gone
	}
	c.last = now
	var forget []uint64
	missing := map[uint64]bool{}
	for _, id := range ids {
		if _, ok := c.r.Path(id); ok {
			delete(c.gone, id)
			continue
		}
		missing[id] = true
		since, seen := c.gone[id]
		switch {
		case !seen:
			c.gone[id] = now
		case now.Sub(since) >= grace:
			forget = append(forget, id)
			delete(c.gone, id)
		}
	}
	for id := range c.gone { // no longer among ids: nothing to forget
		if !missing[id] {
			delete(c.gone, id)
		}
	}
	return forget
}

func (c *cgroupNames) Cgroup(id uint64) (string, podcgroup.Identity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path, ok := c.r.Path(id)
	if !ok && time.Since(c.last) > 10*time.Second {
		c.last = time.Now()
		c.r.Walk() // an unreadable hierarchy leaves ids unresolved, labelled id:N
		path, ok = c.r.Path(id)
	}
	if !ok {
		return "", podcgroup.Identity{}, false
	}
	ident, _ := podcgroup.Parse(path)
	return path, ident, true
}

// handler is an extra HTTP endpoint of a pipeline.
// Handler is an extra endpoint the pipeline serves (/debug/cachelines).
type Handler struct {
	Path, Title string
	Handler     http.Handler
}

// cachelinesHandler serves the hottest shared cache lines as JSON, ?n=
// of them (default 20, at most 1000), their mappings named by namer's
// function for the request (live: /proc/<pid>/maps; replay: the file's
// MMAP records).
func cachelinesHandler(stats *samplestat.Stats, namer func() func(uint32, uint64) string) http.Handler {
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
		display := cacheline.DisplayAny
		if v := r.URL.Query().Get("display"); v != "" {
			d, err := cacheline.ParseDisplay(v)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			display = d
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(stats.Cachelines(n, display, namer()))
	})
}

// replaySamples reads every sample of a perf.data file into the sampling
// collector and /debug/cachelines (named from the file's MMAP records), so
// that a `perf mem record` or `perf c2c record` taken anywhere can be
// looked at on dashboards. The counters hold the file's totals, an AUX
// event's (Arm SPE's) losses by its AUX records' flags among them.
func replaySamples(p *Pipeline, path string, maxLines int, stderr io.Writer, logger *slog.Logger) error {
	file, closeFile, err := recorded.Open(path, nil)
	if err != nil {
		return fmt.Errorf("--replay.samples: %w", err)
	}
	defer closeFile()
	var stats *samplestat.Stats
	var cfgs exporter.FixedPeriods // the recorded periods
	maps := addrmap.New()
	var batch samplestat.Batch
	// AUX records (event, flags): they may come before the first sample,
	// which makes the configs, and say which events are AUX events.
	type auxRecord struct {
		ev    int
		flags uint64
	}
	var auxRecords []auxRecord
	var other uint64 // SPE records of other operations
	samples, bad, err := recorded.EachSample(file, path, stderr, recorded.Visitor{
		Other: func(n uint64) { other = n },
		Record: func(rec []byte, h perfrecord.Header) {
			switch h.Type {
			case perfrecord.TypeMmap, perfrecord.TypeMmap2:
				if m, err := perfrecord.DecodeMmap(rec); err == nil {
					maps.Add(m.PID, addrmap.Mapping{Start: m.Addr, End: m.Addr + m.Len, PgOff: m.PgOff, Name: m.Filename})
				}
			case perfrecord.TypeLost:
				if l, err := perfrecord.DecodeLost(rec); err == nil && stats != nil {
					i, _ := file.Events.ForRecord(rec)
					batch.Lost(i, l.Lost)
				}
			case perfrecord.TypeAux:
				if a, err := perfrecord.DecodeAux(rec); err == nil {
					if i, err := file.Events.ForRecord(rec); err == nil {
						auxRecords = append(auxRecords, auxRecord{i, a.Flags})
					}
				}
			}
		},
		Sample: func(i int, s *perfrecord.Sample) error {
			if stats == nil { // the events are known once records come (pipe mode)
				for k, a := range file.Events.Attrs {
					cfgs = append(cfgs, sampling.Config{Name: file.Names[k], PMU: "replay", Period: a.SamplePeriod(),
						SampleType: a.SampleType, Memory: a.SampleType&unix.PERF_SAMPLE_DATA_SRC != 0})
				}
				stats = samplestat.New(len(cfgs), maxLines)
				batch = stats.Lock()
			}
			if i >= len(cfgs) {
				return nil // an event whose attr came after the first sample
			}
			if s.Has&unix.PERF_SAMPLE_PERIOD == 0 {
				s.Period = cfgs[i].Period
			}
			batch.Sample(i, s, cfgs[i].Memory, false)
			return nil
		},
	})
	if stats != nil {
		for _, a := range auxRecords {
			if a.ev >= 0 && a.ev < len(cfgs) {
				cfgs[a.ev].Aux = true
				batch.AuxFlags(a.ev, a.flags)
			}
		}
		if len(auxRecords) > 0 { // the records made no sample of the AUX event's, as live
			batch.Filtered(auxRecords[0].ev, other)
		}
		batch.Unlock()
	}
	if err != nil {
		return fmt.Errorf("--replay.samples: %w", err)
	}
	if stats == nil {
		return fmt.Errorf("--replay.samples: %s has no samples", path)
	}
	logger.Warn("serving the samples of a perf.data file, not this host's", "file", path, "samples", samples, "malformed", bad, "events", len(cfgs))
	p.add("sampling", exporter.NewSampling(cfgs, stats))
	p.handlers = append(p.handlers, Handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, func() func(uint32, uint64) string { return maps.Name })})
	return nil
}

// liveSampling samples memory accesses (and any --collector.sampling.event).
func liveSampling(b *build) error {
	hotplug, _ := b.hotplugEvents() // for the pipeline's life
	return setupSampling(b.p, b.f.sampling, b.f.cgroups, b.f.procfs, *b.s, b.names, b.online, hotplug, b.log)
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
	if file, closeFile, err := recorded.Open(b.f.replay.samples, nil); err == nil {
		b.replay.sampler = recorded.Sampler(file.Events.Attrs, file.Names)
		closeFile()
	}
	b.sampled = time.Since(start)
	return nil
}
