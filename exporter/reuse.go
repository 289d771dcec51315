package exporter

import (
	"math"
	"strconv"
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

// ReuseCollector exports ReuseTracker's outcomes per cgroup: the
// estimated distribution of the reuse distances (gauges: an estimate from
// every watch so far, which later watches may lower as well as raise) with
// 95% intervals, the share not resolved, and the raw observations behind
// them (counters): reuses by distance bin, watches by outcome, samples.
type ReuseCollector struct {
	src                    ReuseSource
	started                time.Time
	cgroups                CgroupIDs
	names                  PodNames
	invalidations, samples *prometheus.Desc
	dropped, stale         *prometheus.Desc
	armLatency             *prometheus.Desc
	pairs, locality        *prometheus.Desc
	timeShare, eventShare  *prometheus.Desc // the estimated bins
	outcomeShare, watches  *prometheus.Desc
	timeHorizon            *prometheus.Desc
	eventHorizon           *prometheus.Desc
	observed               *prometheus.Desc // the raw observations behind each bin
	observedEvents         *prometheus.Desc
	stack                  *stackDistances
}

// NewReuse exports src; ids and names label the cgroups (ids nil: by id).
// The families of distances and their estimates carry the distance clock
// (label clock: what was counted between use and reuse, the name saying in
// what unit); the raw counts of watches and traps do not, and are each
// counted once however many clocks timed the same watches.
func NewReuse(src ReuseSource, ids CgroupIDs, names PodNames) *ReuseCollector {
	l := append(append([]string(nil), identityLabels[:]...), "mode")
	lc := append(l[:len(l):len(l)], "clock")
	with := func(base []string, extra ...string) []string { return append(base[:len(base):len(base)], extra...) }
	return &ReuseCollector{src: src, cgroups: ids, names: names, started: time.Now(), stack: newStackDistances(l),
		timeShare:      desc("reuse_time_distance_share", "Estimated share of the sampled accesses reused at a time distance in (bucket/2, bucket] seconds (bound estimate; lower and upper: its 95% interval, absent where the bin has no observation), from a sampled access to the next access to the same bytes by its thread (mode private) or by another thread of its last-level cache domain (mode shared), on watchpoints (ReuseTracker); clock thread_cpu: the thread's CPU time between them, wall: CLOCK_MONOTONIC's. Estimated from every watch since the process was first watched, the ones a later sample replaced included (weighted Aalen-Johansen, docs/sampling.md): a gauge, which later watches may lower. Distances shorter than the arm latency are seen as longer.", with(lc, "bucket", "bound")...),
		eventShare:     desc("reuse_event_distance_share", "As pmu_reuse_time_distance_share (mode private), the distance counted in events: the share reused at a distance in [bucket/2, bucket) events of the clock label (accesses: the thread's loads and stores; otherwise the events of --collector.comm.reuse-clock).", with(lc, "bucket", "bound")...),
		outcomeShare:   desc("reuse_outcome_share", "Estimated share of the sampled accesses by outcome: reused (at any distance resolved), invalidated (another thread's or domain's store first), ended (the process exited, or ran a new program, with the watch armed: not reused while it lived), unreused (no outcome by the oldest watch, though watches lasted past twice the last outcome's age: taken as not reused) and not_resolved (no outcome by the oldest watch, pmu_reuse_horizon_*, where they did not: a reuse further away than any watch lasted, or none). They sum to 1 for each clock, the distance clock whose ages the estimate weighs; bound lower and upper are the 95% interval where there is one.", with(lc, "outcome", "bound")...),
		watches:        desc("reuse_watches_total", "Watches (a slot armed on a sampled access) by how they ended: reused, invalidated, ended (its process exited with it armed), or censored (a later sample took the slot first: all that is known is how long it lasted). The estimate's raw observations.", with(l, "outcome")...),
		timeHorizon:    desc("reuse_horizon_seconds", "The oldest age any watch reached, on the distance clock: no distance beyond it is resolved.", lc...),
		eventHorizon:   desc("reuse_horizon_events", "As pmu_reuse_horizon_seconds, for the distance clocks that count events.", lc...),
		invalidations:  desc("reuse_invalidations_total", "Sampled accesses whose bytes another thread (mode private), or a thread of another cache domain (mode shared), stored to before they were reused: observed (traps), unweighted; pmu_reuse_outcome_share{outcome=\"invalidated\"} estimates their share of all sampled accesses.", l...),
		samples:        desc("reuse_samples_total", "Sampled accesses offered to ReuseTracker.", l...),
		stale:          desc("reuse_stale_traps_total", "Traps read after their slot was armed again (another address, a time before the slot's sample, or the sampling thread's own in shared mode): no outcome.", l...),
		observed:       desc("reuse_observed_time_distance_seconds", "The reuses ReuseTracker observed (traps), unweighted, by the buckets of pmu_reuse_time_distance_share: how many observations each estimated bin rests on. A bin estimated from a handful is uncertain however large its estimate.", lc...),
		observedEvents: desc("reuse_observed_event_distance", "The reuses observed, unweighted, by the buckets of pmu_reuse_event_distance_share (the bucket up to 2^(k+1) holds the distances d with 2^k <= d < 2^(k+1)).", lc...),
		pairs:          desc("reuse_pairs_total", "Reuses observed (traps, unweighted) by the kinds of the use and the reuse: RAR, RAW (a load reusing a store), WAR, WAW; a read-modify-write is a write as a use and a read as a reuse; unknown where the trapping instruction could not be decoded.", with(l, "pair")...),
		locality:       desc("reuse_locality_total", "Reuses observed (traps, unweighted) by where the reuse began: at the sampled access's address (temporal) or at another address overlapping the watched bytes (spatial: a watchpoint sees no other part of the line); unknown where the trapping instruction could not be decoded.", with(l, "locality")...),
		dropped:        desc("reuse_samples_dropped_total", "Sampled accesses no watchpoint slot took (the reservoir kept the ones armed).", l...),
		armLatency:     desc("reuse_arm_latency_seconds", "Time from a sampled access to its watchpoints taking effect (the sample read, the registers armed in every thread of its process), on CLOCK_MONOTONIC, node-wide; a reuse sooner than this is missed and a later one seen: distances below it are not measured. Buckets at the powers of two of seconds."),
	}
}

// Describe implements prometheus.Collector.
func (c *ReuseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.timeShare, c.eventShare, c.outcomeShare, c.watches, c.timeHorizon, c.eventHorizon,
		c.observed, c.observedEvents, c.invalidations, c.samples, c.dropped, c.stale, c.armLatency, c.pairs, c.locality,
		c.stack.histogram, c.stack.missRatio} {
		ch <- d
	}
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
	clock  string
}

// Collect implements prometheus.Collector: processes summed per cgroup
// (their trackers merged: the life tables add up), then estimated.
func (c *ReuseCollector) Collect(ch chan<- prometheus.Metric) {
	per := map[reuseKey]*reuse.Tracker{}
	c.src.ReuseView(func(_ uint32, cgroup uint64, t *reuse.Tracker) {
		k := reuseKey{cgroup, t.Mode(), t.Clock()}
		if per[k] == nil {
			per[k] = &reuse.Tracker{}
		}
		per[k].Merge(t)
	})
	c.stack.keepOnly(per)
	ch <- binnedHistogram(c.armLatency, c.src.ArmLatency(), timeBins, c.started)
	counting := countingClocks(per)
	s := Sampling{cgroups: c.cgroups, names: c.names}
	for key, t := range per {
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
		l = append(l, key.mode.String())
		lc := append(l[:len(l):len(l)], key.clock)
		e := t.Estimate()
		if reuse.TimeClock(key.clock) {
			c.shares(ch, c.timeShare, &e, timeBins, lc)
			ch <- binnedHistogram(c.observed, t.Distance, timeBins, c.started, lc...)
			ch <- prometheus.MustNewConstMetric(c.timeHorizon, prometheus.GaugeValue, math.Ldexp(float64(e.Horizon), timeBins), lc...)
		} else {
			c.shares(ch, c.eventShare, &e, 0, lc)
			ch <- binnedHistogram(c.observedEvents, t.Distance, 0, c.started, lc...)
			ch <- prometheus.MustNewConstMetric(c.eventHorizon, prometheus.GaugeValue, float64(e.Horizon), lc...)
		}
		if key.clock == reuse.ClockAccesses && key.mode == reuse.Private {
			fine := e.Fine
			for j := range fine {
				fine[j] *= float64(t.Samples)
			}
			c.stack.collect(ch, key, &fine, t.Samples, l)
		}
		c.outcomeShares(ch, &e, lc)
		if counting[countKey{key.cgroup, key.mode}] != key.clock {
			continue // the same watches, timed on another clock: counted once
		}
		c.watchTotals(ch, t, l)
		ch <- prometheus.MustNewConstMetric(c.invalidations, prometheus.CounterValue, float64(t.Invalidations), l...)
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(t.Samples), l...)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(t.Dropped), l...)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(t.Stale), l...)
		c.kinds(ch, t, l)
	}
}

type countKey struct {
	cgroup uint64
	mode   reuse.Mode
}

// countingClocks picks, for each cgroup and mode, the clock whose tracker
// gives the raw counts: where one trace is replayed on two clocks (accesses
// and thread CPU time) both trackers count the same watches, and a sum over
// them must not count those twice. Live, a run has one clock. The first
// clock by name, so that the pick, and the counters, hold between scrapes.
func countingClocks(per map[reuseKey]*reuse.Tracker) map[countKey]string {
	counting := map[countKey]string{}
	for key := range per {
		k := countKey{key.cgroup, key.mode}
		if c, ok := counting[k]; !ok || key.clock < c {
			counting[k] = key.clock
		}
	}
	return counting
}

// shares exports the estimated bins: bin k is [2^(k+exp), 2^(k+exp+1)),
// the bucket labelled by its upper edge; lower and upper bounds where the
// bin has observations.
func (c *ReuseCollector) shares(ch chan<- prometheus.Metric, d *prometheus.Desc, e *reuse.Estimate, exp int, l []string) {
	for k, b := range e.Bins {
		if b.Share == 0 && b.Observed == 0 {
			continue
		}
		bucket := strconv.FormatFloat(math.Ldexp(1, k+exp+1), 'g', -1, 64)
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, b.Share, append(l[:len(l):len(l)], bucket, "estimate")...)
		if b.Observed > 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, b.Low, append(l[:len(l):len(l)], bucket, "lower")...)
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, b.High, append(l[:len(l):len(l)], bucket, "upper")...)
		}
	}
}

// outcomeShares exports the outcomes' estimated shares (labels lc: with
// the clock).
func (c *ReuseCollector) outcomeShares(ch chan<- prometheus.Metric, e *reuse.Estimate, lc []string) {
	share := func(outcome, bound string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.outcomeShare, prometheus.GaugeValue, v, append(lc[:len(lc):len(lc)], outcome, bound)...)
	}
	share("reused", "estimate", e.Reused())
	share("invalidated", "estimate", e.Invalidated.Share)
	if e.Invalidated.Observed > 0 {
		share("invalidated", "lower", e.Invalidated.Low)
		share("invalidated", "upper", e.Invalidated.High)
	}
	share("ended", "estimate", e.Ended.Share)
	if e.Ended.Observed > 0 {
		share("ended", "lower", e.Ended.Low)
		share("ended", "upper", e.Ended.High)
	}
	share("unreused", "estimate", e.Unreused)
	share("not_resolved", "estimate", e.NotResolved)
}

// watchTotals exports the watches by how they ended (labels l: no clock).
func (c *ReuseCollector) watchTotals(ch chan<- prometheus.Metric, t *reuse.Tracker, l []string) {
	for o, name := range []string{reuse.Reused: "reused", reuse.Invalidated: "invalidated", reuse.Ended: "ended", reuse.Censored: "censored"} {
		if name != "" {
			ch <- prometheus.MustNewConstMetric(c.watches, prometheus.CounterValue, float64(t.Watches(reuse.Outcome(o))), append(l[:len(l):len(l)], name)...)
		}
	}
}

// kinds exports the observed reuses by pair of kinds and by locality.
func (c *ReuseCollector) kinds(ch chan<- prometheus.Metric, t *reuse.Tracker, l []string) {
	sum := func(bins *[reuse.Bins]uint64) (n uint64) {
		for _, v := range bins {
			n += v
		}
		return n
	}
	var unknown uint64
	for u := range t.PairsSeen {
		for k := range t.PairsSeen[u] {
			n := sum(&t.PairsSeen[u][k])
			if name := reuse.PairName(reuse.Kind(u), reuse.Kind(k)); name != "" {
				ch <- prometheus.MustNewConstMetric(c.pairs, prometheus.CounterValue, float64(n), append(l[:len(l):len(l)], name)...)
			} else {
				unknown += n
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.pairs, prometheus.CounterValue, float64(unknown), append(l[:len(l):len(l)], "unknown")...)
	for k, name := range [...]string{reuse.LocalityUnknown: "unknown", reuse.Temporal: "temporal", reuse.Spatial: "spatial"} {
		ch <- prometheus.MustNewConstMetric(c.locality, prometheus.CounterValue, float64(sum(&t.LocalitySeen[k])), append(l[:len(l):len(l)], name)...)
	}
}

// timeBins is the power of two of a second that bin 0 of the live time
// clocks starts at (feed.ReuseClock's units).
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
