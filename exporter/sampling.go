package exporter

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
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
	sampler string // the configs' sampler (plan/sampling: address or memory)

	samples, lost, throttled, filtered, auxLost, period *prometheus.Desc
	periodEvents, periodSeconds                         *prometheus.Desc
	errors                                              *prometheus.Desc
	memSamples, memAccesses, latency, sharing           *prometheus.Desc

	cgroups                                 CgroupIDs
	names                                   PodNames
	cgSamples, cgMem, cgAccesses, cgSharing *prometheus.Desc
}

// FixedPeriods is a SamplingSource whose periods never change: the events
// of a recording (--replay.samples).
type FixedPeriods []sampling.Config

// Configs implements SamplingSource.
func (f FixedPeriods) Configs() []sampling.Config { return f }

// Period implements SamplingSource: the configured period.
func (f FixedPeriods) Period(i int) uint64 { return f[i].Period }

// CgroupIDs names the cgroup ids samples carry (PERF_SAMPLE_CGROUP).
type CgroupIDs interface {
	Cgroup(id uint64) (path string, identity podcgroup.Identity, ok bool)
}

// NewSampling builds the collector.
func NewSampling(src SamplingSource, stats *samplestat.Stats) *Sampling {
	// The sampler label says whose events these are: the address
	// sampler's timer (cpu-clock) or the memory sampler's precise events.
	ev := []string{"sampler", "event", "pmu"}
	class := []string{"op", "source", "snoop"}
	s := &Sampling{src: src, stats: stats, started: time.Now(),
		samples:   desc("sampling_samples_total", "Samples the kernel delivered for the event, on every CPU.", ev...),
		lost:      desc("sampling_lost_total", "Samples lost because a CPU's ring buffer was full when the kernel wrote (PERF_RECORD_LOST); event=\"\" when a lost record named no event.", ev...),
		throttled: desc("sampling_throttled_total", "Times the kernel throttled the event for exceeding perf_event_max_sample_rate (PERF_RECORD_THROTTLE).", ev...),
		filtered:  desc("sampling_filtered_total", "Samples dropped because they had no data address (IBS op samples every op, Arm SPE records branches and other ops; only loads and stores have one).", ev...),
		auxLost: desc("sampling_aux_lost_total",
			"AUX records of an AUX event (Arm SPE) that say its records were lost (PERF_AUX_FLAG_*): reason=truncated (the AUX area was full; the event stopped until the exporter enabled it again), collision (the unit's records collided), partial (the data has gaps).", append(ev, "reason")...),
		errors:        desc("sampling_errors_total", "Records skipped because they could not be read: reason=decode (a record its event's layout does not fit), ring (a corrupt header; the rest of that ring's data dropped), aux (an AUX event, Arm SPE, that could not be stopped and started again to flush its records or after its area filled).", "reason"),
		period:        desc("sampling_period", "Deprecated, kept for one release with its old labels (CHANGELOG.md): pmu_sampling_period_events and pmu_sampling_period_seconds, one unit each, and pmu_comm_sample_period_seconds for the address sampler (here event=\"decode\"). The event's sampling period now in force (events, or ns for cpu-clock).", "event", "pmu"),
		periodEvents:  desc("sampling_period_events", "The event's sampling period now in force, as the governor set it, in events: for the events that count (not the clocks).", ev...),
		periodSeconds: desc("sampling_period_seconds", "The clock event's sampling period now in force, as the governor set it, in seconds of CPU time (cpu-clock, task-clock), for the memory sampler's clocks; the address sampler's, one per sampled cgroup, is pmu_comm_sample_period_seconds.", ev...),
		memSamples:    desc("mem_samples_total", "Memory access samples by operation, the level that served them (data_src) and the snoop result.", class...),
		memAccesses: desc("mem_accesses_estimated_total",
			"Memory accesses estimated from the samples: each sample stands for its sampling period.", class...),
		latency: desc("mem_load_latency_cycles", "Latency of the sampled loads in core cycles (PEBS load latency above --collector.sampling.ldlat, IBS DC miss latency), as a native histogram, with classic buckets at the powers of two."),
		sharing: desc("cacheline_sharing_events_estimated_total",
			"Sampled accesses to cache lines another thread wrote, estimated: kind=true_sharing when the bytes overlap, false_sharing when they do not.", "kind"),
	}
	for _, c := range src.Configs() {
		s.memory = s.memory || c.Memory
		s.sampler = c.Sampler()
	}
	return s
}

// PerCgroup adds the per-cgroup families, the ids named by ids and their
// pods by names (may be nil).
func (s *Sampling) PerCgroup(ids CgroupIDs, names PodNames) *Sampling {
	id := identityLabels[:]
	with := func(l ...string) []string { return append(append([]string(nil), id...), l...) }
	s.cgroups, s.names = ids, names
	s.cgSamples = desc("cgroup_sampling_samples_total", "Samples of the event taken while a task of the cgroup ran (PERF_SAMPLE_CGROUP: the perf_event hierarchy's cgroup). cgroup=\"other\" holds the cgroups beyond the bound.", with("sampler", "event", "pmu")...)
	s.cgMem = desc("cgroup_mem_samples_total", "Memory access samples of the cgroup's tasks by operation and the level that served them.", with("op", "source")...)
	s.cgAccesses = desc("cgroup_mem_accesses_estimated_total", "Memory accesses of the cgroup's tasks estimated from the samples (samples × period).", with("op", "source")...)
	s.cgSharing = desc("cgroup_cacheline_sharing_events_estimated_total", "The cgroup's sampled accesses to cache lines another thread wrote, estimated, by kind.", with("kind")...)
	return s
}

// cgroupLabels are the cgroup, namespace, pod and container of an id.
func (s *Sampling) cgroupLabels(id uint64) []string {
	if id == samplestat.OtherCgroup {
		return []string{"other", "", "", ""}
	}
	path, ident, ok := s.cgroups.Cgroup(id)
	if !ok {
		return []string{"id:" + strconv.FormatUint(id, 10), "", "", ""}
	}
	v := identityValues(path, ident, s.names)
	return v[:]
}

// Describe sends the descriptors.
func (s *Sampling) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.samples, s.lost, s.throttled, s.filtered, s.auxLost, s.period, s.periodEvents, s.periodSeconds, s.errors, s.memSamples, s.memAccesses, s.latency, s.sharing} {
		ch <- d
	}
	if s.cgroups != nil {
		for _, d := range []*prometheus.Desc{s.cgSamples, s.cgMem, s.cgAccesses, s.cgSharing} {
			ch <- d
		}
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
		sampler := c.Sampler()
		counter(s.samples, e.Samples, sampler, c.Name, c.PMU)
		counter(s.lost, e.Lost, sampler, c.Name, c.PMU)
		counter(s.throttled, e.Throttled, sampler, c.Name, c.PMU)
		if c.AddrOnly || c.Aux {
			counter(s.filtered, e.Filtered, sampler, c.Name, c.PMU)
		}
		if c.Aux {
			for k, reason := range samplestat.AuxLosses {
				counter(s.auxLost, e.AuxLost[k], sampler, c.Name, c.PMU, reason)
			}
		}
		s.periods(ch, c, s.src.Period(i))
	}
	if snap.Lost > 0 {
		counter(s.lost, snap.Lost, s.sampler, "", "")
	}
	for _, reason := range []string{"decode", "ring", "aux"} {
		counter(s.errors, snap.Errors[reason], reason)
	}
	if s.cgroups != nil {
		s.collectCgroups(ch, snap)
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
	ch <- newNativeHistogram(s.latency, l.Count, l.Sum, l.Buckets, l.Zero, samplestat.Schema, s.started)
	counter(s.sharing, snap.Sharing[cacheline.TrueSharing], "true_sharing")
	counter(s.sharing, snap.Sharing[cacheline.FalseSharing], "false_sharing")
}

// periods exports config c's period now in force: in events or seconds by
// its kind, the address sampler's only in the deprecated family (its own,
// per sampled cgroup, is pmu_comm_sample_period_seconds).
func (s *Sampling) periods(ch chan<- prometheus.Metric, c sampling.Config, period uint64) {
	oldName := c.Name
	if c.Sampler() == sampling.SamplerAddress {
		oldName = "decode" // as it was, for the release the family is kept
	}
	ch <- prometheus.MustNewConstMetric(s.period, prometheus.GaugeValue, float64(period), oldName, c.PMU)
	switch {
	case c.Sampler() == sampling.SamplerAddress:
	case c.PeriodIsTime():
		ch <- prometheus.MustNewConstMetric(s.periodSeconds, prometheus.GaugeValue, float64(period)/1e9, c.Sampler(), c.Name, c.PMU)
	default:
		ch <- prometheus.MustNewConstMetric(s.periodEvents, prometheus.GaugeValue, float64(period), c.Sampler(), c.Name, c.PMU)
	}
}

func (s *Sampling) collectCgroups(ch chan<- prometheus.Metric, snap samplestat.Snapshot) {
	cfgs := s.src.Configs()
	for id, cg := range snap.Cgroups {
		l := s.cgroupLabels(id)
		with := func(v ...string) []string { return append(append([]string(nil), l...), v...) }
		for i, n := range cg.Samples {
			ch <- prometheus.MustNewConstMetric(s.cgSamples, prometheus.CounterValue, float64(n), with(cfgs[i].Sampler(), cfgs[i].Name, cfgs[i].PMU)...)
		}
		if !s.memory {
			continue
		}
		for op, sources := range cg.Classes {
			for src, c := range sources {
				if c.Samples == 0 {
					continue
				}
				v := with(samplestat.Ops[op], datasrc.Source(src).String())
				ch <- prometheus.MustNewConstMetric(s.cgMem, prometheus.CounterValue, float64(c.Samples), v...)
				ch <- prometheus.MustNewConstMetric(s.cgAccesses, prometheus.CounterValue, float64(c.Accesses), v...)
			}
		}
		ch <- prometheus.MustNewConstMetric(s.cgSharing, prometheus.CounterValue, float64(cg.Sharing[cacheline.TrueSharing]), with("true_sharing")...)
		ch <- prometheus.MustNewConstMetric(s.cgSharing, prometheus.CounterValue, float64(cg.Sharing[cacheline.FalseSharing]), with("false_sharing")...)
	}
}
