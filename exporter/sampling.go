package exporter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/cacheline"
	"github.com/pmu-exporter/pmu_exporter/datasrc"
	"github.com/pmu-exporter/pmu_exporter/samplestat"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// SamplingSource is the running sampler.
type SamplingSource interface {
	Configs() []sampling.Config
	Period(i int) uint64
}

// Sampling exports the sampling path: per event the samples, losses,
// throttles and current period; per access class the memory samples and
// the accesses they stand for; the load latency; and the sharing events.
// Ratios (L3 HITM share, lost fraction) are left to PromQL.
type Sampling struct {
	src     SamplingSource
	stats   *samplestat.Stats
	started time.Time
	memory  bool

	samples, lost, throttled, filtered, period *prometheus.Desc
	memSamples, memAccesses, latency, sharing  *prometheus.Desc
}

// NewSampling builds the collector.
func NewSampling(src SamplingSource, stats *samplestat.Stats) *Sampling {
	ev := []string{"event", "pmu"}
	class := []string{"op", "source", "snoop"}
	s := &Sampling{src: src, stats: stats, started: time.Now(),
		samples:    prometheus.NewDesc(namespace+"_sampling_samples_total", "Samples the kernel delivered for the event, on every CPU.", ev, nil),
		lost:       prometheus.NewDesc(namespace+"_sampling_lost_total", "Samples lost because a CPU's ring buffer was full when the kernel wrote (PERF_RECORD_LOST); event=\"\" when a lost record named no event.", ev, nil),
		throttled:  prometheus.NewDesc(namespace+"_sampling_throttled_total", "Times the kernel throttled the event for exceeding perf_event_max_sample_rate (PERF_RECORD_THROTTLE).", ev, nil),
		filtered:   prometheus.NewDesc(namespace+"_sampling_filtered_total", "Samples dropped because they had no data address (IBS op samples every op; only loads and stores have one).", ev, nil),
		period:     prometheus.NewDesc(namespace+"_sampling_period", "The event's sampling period now in force, as the governor set it (events, or ns for cpu-clock).", ev, nil),
		memSamples: prometheus.NewDesc(namespace+"_mem_samples_total", "Memory access samples by operation, the level that served them (data_src) and the snoop result.", class, nil),
		memAccesses: prometheus.NewDesc(namespace+"_mem_accesses_estimated_total",
			"Memory accesses estimated from the samples: each sample stands for its sampling period.", class, nil),
		latency: prometheus.NewDesc(namespace+"_mem_load_latency_cycles", "Latency of the sampled loads in core cycles (PEBS load latency above --sampling.ldlat, IBS DC miss latency), as a native histogram.", nil, nil),
		sharing: prometheus.NewDesc(namespace+"_cacheline_sharing_events_estimated_total",
			"Sampled accesses to cache lines another thread wrote, estimated: kind=true_sharing when the bytes overlap, false_sharing when they do not.", []string{"kind"}, nil),
	}
	for _, c := range src.Configs() {
		s.memory = s.memory || c.Memory
	}
	return s
}

// Describe sends the descriptors.
func (s *Sampling) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.samples, s.lost, s.throttled, s.filtered, s.period, s.memSamples, s.memAccesses, s.latency, s.sharing} {
		ch <- d
	}
}

// Collect sends a snapshot.
func (s *Sampling) Collect(ch chan<- prometheus.Metric) {
	snap := s.stats.Snapshot()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for i, c := range s.src.Configs() {
		e := snap.Events[i]
		counter(s.samples, e.Samples, c.Name, c.PMU)
		counter(s.lost, e.Lost, c.Name, c.PMU)
		counter(s.throttled, e.Throttled, c.Name, c.PMU)
		if c.AddrOnly {
			counter(s.filtered, e.Filtered, c.Name, c.PMU)
		}
		ch <- prometheus.MustNewConstMetric(s.period, prometheus.GaugeValue, float64(s.src.Period(i)), c.Name, c.PMU)
	}
	if snap.Lost > 0 {
		counter(s.lost, snap.Lost, "", "")
	}
	if !s.memory {
		return
	}
	for op, sources := range snap.Classes {
		for src, snoops := range sources {
			for snoop, c := range snoops {
				if c.Samples == 0 {
					continue
				}
				labels := []string{samplestat.Ops[op], datasrc.Source(src).String(), samplestat.Snoops[snoop]}
				counter(s.memSamples, c.Samples, labels...)
				counter(s.memAccesses, c.Accesses, labels...)
			}
		}
	}
	l := snap.Latency
	if h, err := prometheus.NewConstNativeHistogram(s.latency, l.Count, l.Sum, l.Buckets, nil, l.Zero, samplestat.Schema, 0, s.started); err == nil {
		ch <- h
	} else {
		ch <- prometheus.NewInvalidMetric(s.latency, err)
	}
	counter(s.sharing, snap.Sharing[cacheline.TrueSharing], "true_sharing")
	counter(s.sharing, snap.Sharing[cacheline.FalseSharing], "false_sharing")
}
