package exporter

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
)

// ReuseSource is the live ReuseTracker of each watched process.
type ReuseSource interface {
	ReuseView(f func(pid uint32, cgroup uint64, t *reuse.Tracker))
	// ArmLatency is how long after its sample each arm took effect, by
	// tracker bin (2^(k−30) s).
	ArmLatency() [reuse.Bins]uint64
}

// ReuseCollector exports ReuseTracker's outcomes per cgroup: the reuse
// time distance as a native histogram (schema 0: buckets at the powers of
// two of seconds) with the same buckets as classic ones, each observed reuse
// weighted by the inverse of its chance to be observed; invalidations,
// samples and the samples no slot took.
type ReuseCollector struct {
	src                                       ReuseSource
	started                                   time.Time
	cgroups                                   CgroupIDs
	names                                     PodNames
	distance, invalidations, samples, dropped *prometheus.Desc
	stale, armLatency                         *prometheus.Desc
	pairs, locality                           *prometheus.Desc
	eventDistance                             *prometheus.Desc
	observed, observedEvents                  *prometheus.Desc // the raw observations behind each bin
	stack                                     *stackDistances
}

// NewReuse exports src; ids and names label the cgroups (ids nil: by id).
func NewReuse(src ReuseSource, ids CgroupIDs, names PodNames) *ReuseCollector {
	l := append(append([]string(nil), identityLabels[:]...), "mode", "unit")
	return &ReuseCollector{src: src, cgroups: ids, names: names, started: time.Now(), stack: newStackDistances(l),
		distance:       desc("reuse_time_distance_seconds", "Time from a sampled access to the next access to the same bytes by its thread (mode private) or by another thread of its last-level cache domain (mode shared), on watchpoints (ReuseTracker), estimated for all sampled accesses; unit thread_cpu_seconds: the thread's CPU time between them, wall_seconds: CLOCK_MONOTONIC's; buckets at the powers of two of seconds (native, and classic for a Prometheus without native histograms). Distances shorter than the arm latency (a sample is read, then its watchpoint armed) are seen as longer.", l...),
		invalidations:  desc("reuse_invalidations_total", "Sampled accesses whose bytes another thread (mode private), or a thread of another cache domain (mode shared), stored to before they were reused.", l...),
		samples:        desc("reuse_samples_total", "Sampled accesses offered to ReuseTracker.", l...),
		stale:          desc("reuse_stale_traps_total", "Traps read after their slot was armed again (another address, a time before the slot's sample, or the sampling thread's own in shared mode): no outcome.", l...),
		eventDistance:  desc("reuse_event_distance", "As pmu_reuse_time_distance_seconds (mode private), counted in the events of --collector.comm.reuse-clock (the unit label), which each watched thread's group counts and its samples and traps read: ReuseTracker's clock is retired loads and stores. Buckets at the powers of two: the bucket up to 2^(k+1) holds the distances d with 2^k <= d < 2^(k+1) (log2 bins).", l...),
		observed:       desc("reuse_observed_time_distance_seconds", "The reuses ReuseTracker observed (traps), unweighted, by the bins of pmu_reuse_time_distance_seconds: how many observations each of its estimated bins rests on. A bin estimated from a handful is uncertain however large its estimate.", l...),
		observedEvents: desc("reuse_observed_event_distance", "The reuses observed, unweighted, by the bins of pmu_reuse_event_distance: how many observations each of its estimated bins rests on.", l...),
		pairs:          desc("reuse_pairs_total", "Reuses (estimated, as the histogram) by the kinds of the use and the reuse: RAR, RAW (a load reusing a store), WAR, WAW; a read-modify-write is a write as a use and a read as a reuse; unknown where the trapping instruction could not be decoded.", append(l[:len(l):len(l)], "pair")...),
		locality:       desc("reuse_locality_total", "Reuses (estimated, as the histogram) by where the reuse began: at the sampled access's address (temporal) or at another address overlapping the watched bytes (spatial: a watchpoint sees no other part of the line); unknown where the trapping instruction could not be decoded.", append(l[:len(l):len(l)], "locality")...),
		dropped:        desc("reuse_samples_dropped_total", "Sampled accesses no watchpoint slot took (the reservoir kept the ones armed).", l...),
		armLatency:     desc("reuse_arm_latency_seconds", "Time from a sampled access to its watchpoints taking effect (the sample read, the registers armed in every thread of its process), on CLOCK_MONOTONIC, node-wide; a reuse sooner than this is missed and a later one seen: distances below it are not measured. Buckets at the powers of two of seconds."),
	}
}

// Describe implements prometheus.Collector.
func (c *ReuseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.distance
	ch <- c.observed
	ch <- c.observedEvents
	ch <- c.invalidations
	ch <- c.samples
	ch <- c.dropped
	ch <- c.stale
	ch <- c.armLatency
	ch <- c.pairs
	ch <- c.locality
	ch <- c.eventDistance
	ch <- c.stack.histogram
	ch <- c.stack.missRatio
}

// WithCaches gives the host's cache sizes in bytes (0: not known) for the
// miss ratios of trackers whose clock counts accesses, lines of 64 bytes.
func (c *ReuseCollector) WithCaches(l1d, l2, llc uint64) *ReuseCollector {
	c.stack.caches = map[string]float64{}
	for name, size := range map[string]uint64{"L1d": l1d, "L2": l2, "LLC": llc} {
		if size > 0 {
			c.stack.caches[name] = float64(size / 64)
		}
	}
	return c
}

type reuseKey struct {
	cgroup uint64
	mode   reuse.Mode
	unit   string
}

type reuseTotals struct {
	bins             [reuse.Bins]float64
	observed         [reuse.Bins]uint64 // raw reuses, unweighted
	invalidations    float64
	samples, dropped uint64
	stale            uint64
	pairs            [3][3]float64
	locality         [3]float64
	fine             [reuse.Bins * reuse.SubBins]float64 // unit accesses: for the stack distances
}

// Collect implements prometheus.Collector: processes summed per cgroup.
func (c *ReuseCollector) Collect(ch chan<- prometheus.Metric) {
	per := map[reuseKey]*reuseTotals{}
	c.src.ReuseView(func(_ uint32, cgroup uint64, t *reuse.Tracker) {
		k := reuseKey{cgroup, t.Mode(), t.Unit()}
		r := per[k]
		if r == nil {
			r = &reuseTotals{}
			per[k] = r
		}
		for k, v := range t.Estimated {
			r.bins[k] += v
		}
		for k, v := range t.Distance {
			r.observed[k] += v
		}
		// Rounded once per cgroup, after the sum: rounded per process, a
		// process that exits and leaves its totals to its cgroup's could
		// make the counter go down.
		r.invalidations += t.EstimatedInvalidations
		r.samples += t.Samples
		r.dropped += t.Dropped
		r.stale += t.Stale
		for u := range t.Pairs {
			for k := range t.Pairs[u] {
				r.pairs[u][k] += t.Pairs[u][k]
			}
		}
		for k := range t.Locality {
			r.locality[k] += t.Locality[k]
		}
		if t.Unit() == reuse.UnitAccesses {
			for j, v := range t.Fine {
				r.fine[j] += v
			}
		}
	})
	c.stack.keepOnly(per)
	ch <- binnedHistogram(c.armLatency, c.src.ArmLatency(), timeBins, c.started)
	s := Sampling{cgroups: c.cgroups, names: c.names}
	for key, r := range per {
		id := key.cgroup
		var l []string
		if c.cgroups != nil {
			l = s.cgroupLabels(id)
		} else {
			l = []string{"id:" + strconv.FormatUint(id, 10), "", "", ""}
		}
		if id == samplestat.OtherCgroup {
			l = []string{"other", "", "", ""}
		}
		l = append(l, key.mode.String(), key.unit)
		var bins [reuse.Bins]uint64
		for k, v := range r.bins {
			bins[k] = uint64(math.Round(v))
		}
		if strings.HasSuffix(key.unit, "_seconds") {
			ch <- binnedHistogram(c.distance, bins, timeBins, c.started, l...)
			ch <- binnedHistogram(c.observed, r.observed, timeBins, c.started, l...)
		} else {
			ch <- binnedHistogram(c.eventDistance, bins, 0, c.started, l...)
			ch <- binnedHistogram(c.observedEvents, r.observed, 0, c.started, l...)
		}
		if key.unit == reuse.UnitAccesses && key.mode == reuse.Private {
			c.stack.collect(ch, key, &r.fine, r.samples, l)
		}
		ch <- prometheus.MustNewConstMetric(c.invalidations, prometheus.CounterValue, math.Round(r.invalidations), l...)
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(r.samples), l...)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(r.dropped), l...)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(r.stale), l...)
		unknown := 0.0
		for u := range r.pairs {
			for k, v := range r.pairs[u] {
				if name := reuse.PairName(reuse.Kind(u), reuse.Kind(k)); name != "" {
					ch <- prometheus.MustNewConstMetric(c.pairs, prometheus.CounterValue, math.Round(v), append(l[:len(l):len(l)], name)...)
				} else {
					unknown += v
				}
			}
		}
		ch <- prometheus.MustNewConstMetric(c.pairs, prometheus.CounterValue, math.Round(unknown), append(l[:len(l):len(l)], "unknown")...)
		for k, name := range [...]string{reuse.LocalityUnknown: "unknown", reuse.Temporal: "temporal", reuse.Spatial: "spatial"} {
			ch <- prometheus.MustNewConstMetric(c.locality, prometheus.CounterValue, math.Round(r.locality[k]), append(l[:len(l):len(l)], name)...)
		}
	}
}

// timeBins is the power of two of a second that bin 0 of the live time
// clocks starts at (perfsample.ReuseClock's units).
const timeBins = -30

// binnedHistogram exports tracker bins as a native histogram with classic
// buckets: bin k is [2^(k+exp), 2^(k+exp+1)) in the metric's unit (time:
// exp timeBins, seconds; event counts: 0), the native bucket k+exp+1 at
// schema 0, (2^(k+exp), 2^(k+exp+1)]; the sum takes each bin's mid-point.
func binnedHistogram(desc *prometheus.Desc, bins [reuse.Bins]uint64, exp int, started time.Time, labels ...string) prometheus.Metric {
	buckets := map[int]int64{}
	var count uint64
	var sum float64
	for k, n := range bins {
		if n == 0 {
			continue
		}
		count += n
		sum += float64(n) * math.Ldexp(1.5, k+exp)
		buckets[k+exp+1] = int64(n)
	}
	return newNativeHistogram(desc, count, sum, buckets, 0, 0, started, labels...)
}
