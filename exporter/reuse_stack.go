package exporter

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
)

// stackBounds are the stack-distance histogram's buckets: the powers of
// two of cache lines up to 2^36 (4 TiB of 64-byte lines).
var stackBounds = func() []float64 {
	b := make([]float64, 37)
	for i := range b {
		b[i] = math.Ldexp(1, i)
	}
	return b
}()

// stackDistances turns the reuses of trackers whose clock counts accesses
// into LRU stack distances with the footprint (reuse.Footprint), and the
// miss ratios of the host's caches. A reuse's stack distance depends on
// the footprint of everything sampled, which changes as samples come: to
// keep the histogram's buckets counters, each scrape places only the
// reuses new since the last one, with the footprint as it is then, and
// adds them to what earlier scrapes placed.
type stackDistances struct {
	histogram, missRatio *prometheus.Desc
	caches               map[string]float64 // name (L1d, L2, LLC) → lines

	mu     sync.Mutex
	placed map[reuseKey]*placedReuses
}

type placedReuses struct {
	fine [reuse.Bins * reuse.SubBins]float64 // the estimated reuses placed so far
	cum  []float64                           // reuses at a stack distance ≤ stackBounds[i]
}

func newStackDistances(labels []string) *stackDistances {
	return &stackDistances{placed: map[reuseKey]*placedReuses{},
		histogram: desc("reuse_stack_distance_lines", "LRU stack distance of the sampled accesses, in cache lines (each watched datum taken as a line, so an upper bound where data share lines): the distinct data between a use and its reuse, from the reuse distances in accesses (--collector.comm.reuse-clock=accesses) by the footprint theory (Xiang et al., PPoPP 2011); accesses not reused (yet) are above every bucket, so the miss ratio of an LRU cache of C lines is the fraction above C. Each reuse is placed with the footprint as it was at the scrape that first saw it.", labels...),
		missRatio: desc("reuse_miss_ratio", "Share of the sampled accesses that an LRU cache of this host's size (cache: L1d, L2, LLC, from sysfs; replaying a trace, of the host of --replay.samples, from its HEADER_CACHE) would miss, by the footprint of everything sampled so far (see pmu_reuse_stack_distance_lines).", append(labels[:len(labels):len(labels)], "cache")...),
	}
}

// collect exports a cgroup's stack distances and miss ratios (labels l)
// from its trackers' fine reuse histogram and samples.
func (s *stackDistances) collect(ch chan<- prometheus.Metric, key reuseKey, fine *[reuse.Bins * reuse.SubBins]float64, samples uint64, l []string) {
	fp := reuse.NewFootprint(fine[:], float64(samples))
	s.mu.Lock()
	p := s.placed[key]
	if p == nil {
		p = &placedReuses{cum: make([]float64, len(stackBounds))}
		s.placed[key] = p
	}
	var fresh [reuse.Bins * reuse.SubBins]float64
	for j := range fine {
		fresh[j] = max(fine[j]-p.fine[j], 0)
		p.fine[j] = max(p.fine[j], fine[j])
	}
	for i, c := range fp.StackDistances(fresh[:], stackBounds) {
		p.cum[i] += c
	}
	buckets := make(map[float64]uint64, len(stackBounds))
	var sum float64
	prev := 0.0
	for i, b := range stackBounds {
		n := min(math.Round(p.cum[i]), float64(samples))
		buckets[b] = uint64(n)
		sum += (n - prev) * 0.75 * b // the bucket's mid-point, (b/2 + b)/2
		prev = max(prev, n)
	}
	s.mu.Unlock()
	ch <- prometheus.MustNewConstHistogram(s.histogram, samples, sum, buckets, l...)
	for name, lines := range s.caches {
		ch <- prometheus.MustNewConstMetric(s.missRatio, prometheus.GaugeValue, fp.MissRatio(lines), append(l[:len(l):len(l)], name)...)
	}
}

// keepOnly forgets the placed reuses of every key but those the source
// still reports: its cgroups gone (their series ended) would otherwise be
// kept for the exporter's lifetime.
func (s *stackDistances) keepOnly(keys map[reuseKey]*reuse.Tracker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.placed {
		if _, ok := keys[k]; !ok {
			delete(s.placed, k)
		}
	}
}
