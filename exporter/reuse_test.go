package exporter

import (
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
)

type oneTracker struct {
	t   *reuse.Tracker
	lat [reuse.Bins]uint64
}

func (o oneTracker) ArmLatency() [reuse.Bins]uint64 { return o.lat }

func (o oneTracker) ReuseView(f func(pid uint32, cgroup uint64, t *reuse.Tracker)) { f(1, 42, o.t) }

// Reuses 3 µs and 0.7 ms after their use (on the live clock), and one
// invalidation, no watch censored: the estimate is then the plain shares,
// a third each, with the binomial interval 1/3 ± 1.96·√(1/3·2/3/3); the
// reuses' bins are labelled by their upper edges, 2^-18 s (3 µs) and 2^-10
// s (0.7 ms); the observed histogram holds them, native and classic.
func TestReuseSharesAndObserved(t *testing.T) {
	if got := feed.ReuseClock(1e9); got != 1<<30 {
		t.Fatalf("ReuseClock(1 s) = %d, want 2^30", got)
	}
	tr := reuse.New(nopBackend{}, reuse.Options{Slots: 4, Clock: reuse.ClockThreadCPU})
	tr.Sample(reuse.Use{TID: 1, Addr: 0x1000, Size: 8, Kind: reuse.Write, Clock: feed.ReuseClock(1e9)})
	tr.Trapped(reuse.Hit{TID: 1, Clock: feed.ReuseClock(1e9 + 3000), Addr: 0x1000, Size: 4, Kind: reuse.Read}) // RAW, temporal
	tr.Sample(reuse.Use{TID: 1, Addr: 0x2000, Size: 8, Kind: reuse.Write, Clock: feed.ReuseClock(2e9)})
	tr.Trapped(reuse.Hit{TID: 1, Clock: feed.ReuseClock(2e9 + 700_000)})
	tr.Sample(reuse.Use{TID: 1, Addr: 0x3000, Size: 8, Kind: reuse.Write, Clock: feed.ReuseClock(3e9)})
	tr.Trapped(reuse.Hit{TID: 2, Clock: feed.ReuseClock(3e9 + 10)}) // another thread's store
	// Three arms took effect 5 ms after their samples: ReuseClock(5 ms)
	// lies in bin 22, [2^-8, 2^-7) s, the native bucket -7.
	src := oneTracker{t: tr}
	src.lat[bits.Len64(feed.ReuseClock(5e6))-1] = 3
	c := NewReuse(src, nil, nil)
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	kinds := map[string]float64{}
	shares, outcomes, watches := map[string]float64{}, map[string]float64{}, map[string]float64{}
	var observed *dto.Histogram
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		switch m.Desc() {
		case c.timeShare:
			if label(&out, "mode") != "private" || label(&out, "clock") != "thread_cpu" {
				t.Errorf("labels %v, want mode private, clock thread_cpu (the tracker's clock)", out.GetLabel())
			}
			shares[label(&out, "bucket")+" "+label(&out, "bound")] = out.GetGauge().GetValue()
		case c.outcomeShare:
			outcomes[label(&out, "outcome")+" "+label(&out, "bound")] = out.GetGauge().GetValue()
		case c.watches:
			watches[label(&out, "outcome")] = out.GetCounter().GetValue()
		case c.observed:
			observed = out.GetHistogram()
		case c.armLatency:
			lat := out.GetHistogram()
			if lat.GetSampleCount() != 3 || len(lat.GetPositiveSpan()) != 1 || lat.GetPositiveSpan()[0].GetOffset() != -7 {
				t.Errorf("arm latency %v, want 3 in the native bucket -7 (2^-8, 2^-7] s", lat)
			}
		case c.invalidations:
			if out.GetCounter().GetValue() != 1 {
				t.Errorf("invalidations %v, want 1", out.GetCounter().GetValue())
			}
		case c.pairs:
			kinds[label(&out, "pair")] += out.GetCounter().GetValue()
		case c.locality:
			kinds[label(&out, "locality")] += out.GetCounter().GetValue()
		}
	}
	// One of three watches in each: Wilson's interval of 1/3 out of 3,
	// (p + z²/2n ± z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n).
	const watches3, z = 3.0, 1.96
	third := 1.0 / 3
	center := (third + z*z/(2*watches3)) / (1 + z*z/watches3)
	half := z * math.Sqrt(third*(1-third)/watches3+z*z/(4*watches3*watches3)) / (1 + z*z/watches3)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, b := range []string{"3.814697265625e-06", "0.0009765625"} {
		if !near(shares[b+" estimate"], third) || !near(shares[b+" lower"], center-half) || !near(shares[b+" upper"], center+half) {
			t.Errorf("bucket %s: %v, want %.4f in [%.4f, %.4f]", b, shares, third, center-half, center+half)
		}
	}
	if len(shares) != 6 || !near(outcomes["reused estimate"], 2*third) || !near(outcomes["invalidated estimate"], third) ||
		!near(outcomes["invalidated upper"], center+half) || outcomes["not_resolved estimate"] != 0 || outcomes["unreused estimate"] != 0 {
		t.Errorf("shares %v, outcomes %v", shares, outcomes)
	}
	if want := map[string]float64{"reused": 2, "invalidated": 1, "ended": 0, "censored": 0}; !maps.Equal(watches, want) {
		t.Errorf("watches %v, want %v", watches, want)
	}
	// One reuse decoded (a load of the stored bytes: RAW, temporal), one
	// not (pair and locality unknown).
	if want := map[string]float64{"RAR": 0, "RAW": 1, "WAR": 0, "WAW": 0, "unknown": 2, "temporal": 1, "spatial": 0}; !maps.Equal(kinds, want) {
		t.Errorf("pairs and localities %v, want %v", kinds, want)
	}
	// The observations: native bucket indexes -18 (3 µs ≤ 2^-18 s = 3.8
	// µs) and -10 (0.7 ms ≤ 2^-10 s = 0.98 ms), and the classic buckets.
	h := observed
	if h == nil || h.GetSampleCount() != 2 || h.GetSchema() != 0 {
		t.Fatalf("observed %v", h)
	}
	nonzero := map[int32]int64{}
	i, d, n := int32(0), 0, int64(0)
	for _, sp := range h.GetPositiveSpan() {
		i += sp.GetOffset()
		for range sp.GetLength() {
			if n += h.GetPositiveDelta()[d]; n != 0 {
				nonzero[i] = n
			}
			i, d = i+1, d+1
		}
	}
	if len(nonzero) != 2 || nonzero[-18] != 1 || nonzero[-10] != 1 {
		t.Errorf("native buckets %v, want -18: 1 and -10: 1", nonzero)
	}
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= math.Ldexp(1, -18) {
			want = 1
		}
		if b.GetUpperBound() >= math.Ldexp(1, -10) {
			want = 2
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("classic le=%g: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

type nopBackend struct{}

func (nopBackend) Threads() []uint32                          { return []uint32{1, 2} }
func (nopBackend) Arm(uint32, int, uint64, uint8, reuse.Trap) {}
func (nopBackend) Disarm(uint32, int)                         {}

// trackers is a cgroup's processes' trackers, and the totals of those gone.
type trackers struct{ live, gone []*reuse.Tracker }

func (ts *trackers) ArmLatency() [reuse.Bins]uint64 { return [reuse.Bins]uint64{} }

func (ts *trackers) ReuseView(f func(pid uint32, cgroup uint64, t *reuse.Tracker)) {
	for i, t := range ts.live {
		f(uint32(i+1), 42, t)
	}
	for _, t := range ts.gone {
		f(0, 42, t)
	}
}

// Two processes of a cgroup, one invalidation each: the cgroup's counter
// is 2, and stays 2 as they exit and their totals join the cgroup's.
func TestReuseCountersNeverGoDown(t *testing.T) {
	a, b := reuse.New(nopBackend{}, reuse.Options{}), reuse.New(nopBackend{}, reuse.Options{})
	for _, tr := range []*reuse.Tracker{a, b} {
		tr.Sample(reuse.Use{TID: 1, Addr: 0x1000, Size: 8, Clock: 1})
		tr.Trapped(reuse.Hit{TID: 2, Clock: 5})
	}
	src := &trackers{live: []*reuse.Tracker{a, b}}
	c := NewReuse(src, nil, nil)
	value := func() float64 {
		ch := make(chan prometheus.Metric, 100)
		c.Collect(ch)
		close(ch)
		for m := range ch {
			var out dto.Metric
			if m.Desc() == c.invalidations && m.Write(&out) == nil {
				return out.GetCounter().GetValue()
			}
		}
		return -1
	}
	seen := []float64{value()}
	gone := reuse.New(nil, reuse.Options{})
	gone.Merge(b)
	src.live, src.gone = []*reuse.Tracker{a}, []*reuse.Tracker{gone}
	seen = append(seen, value())
	gone.Merge(a)
	src.live = nil
	seen = append(seen, value())
	if seen[0] != 2 || seen[1] != 2 || seen[2] != 2 {
		t.Errorf("invalidations %v as the processes exited; want 2 throughout", seen)
	}
}

// A tracker whose clock counts events (--collector.comm.reuse-clock): its
// reuses go to pmu_reuse_event_distance_share and the observed histogram, at
// the powers of two of counts: a
// reuse 3 events after its use is in (2, 4], native bucket 2.
func TestReuseEventDistance(t *testing.T) {
	tr := reuse.New(nopBackend{}, reuse.Options{Slots: 1, Clock: "page-faults"})
	tr.Sample(reuse.Use{TID: 1, Addr: 0x1000, Size: 8, Kind: reuse.Write, Clock: 100})
	tr.Trapped(reuse.Hit{TID: 1, Clock: 103})
	c := NewReuse(oneTracker{t: tr}, nil, nil)
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	var h *dto.Histogram
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		if m.Desc() == c.timeShare || m.Desc() == c.observed {
			t.Errorf("an event clock's reuses in the seconds' metrics: %v", &out)
		}
		// The one reuse: a share of 1, its interval Wilson's for 1 of 1,
		// [1/(1 + 1.96²), 1].
		if m.Desc() == c.eventShare {
			want := 1.0
			for _, lp := range out.GetLabel() {
				if lp.GetName() == "bound" && lp.GetValue() == "lower" {
					want = 1 / (1 + 1.96*1.96)
				}
			}
			if math.Abs(out.GetGauge().GetValue()-want) > 1e-9 {
				t.Errorf("event distance share %v, want %v", &out, want)
			}
		}
		if m.Desc() == c.observedEvents {
			h = out.Histogram
			if label(&out, "clock") != "page-faults" {
				t.Errorf("clock %q, want page-faults (the events counted)", label(&out, "clock"))
			}
		}
	}
	if h == nil || h.GetSampleCount() != 1 || len(h.GetPositiveSpan()) != 1 || h.GetPositiveSpan()[0].GetOffset() != 2 || h.GetSampleSum() != 3 {
		t.Fatalf("event distance %v, want one reuse in the native bucket 2 (2, 4], sum 3 (the bin's mid-point)", h)
	}
	classic := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		classic[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if classic[2] != 0 || classic[4] != 1 {
		t.Errorf("classic buckets %v, want 0 up to 2 and 1 up to 4", h.GetBucket())
	}
}

// A tracker whose clock counts accesses (the trace harness's, as
// --collector.comm.reuse-clock=accesses live) gets LRU stack distances in
// lines and miss ratios at the host's caches: one thread reading 2048 data
// uniformly at random misses 1 − C/2048 of its accesses in an LRU cache of
// C lines (each datum a line of its own), both in the gauges and as the
// histogram's fraction above C; and the histogram's buckets only grow as
// more reuses come, though the footprint that places them changes.
func TestReuseStackDistances(t *testing.T) {
	const n = 2048
	rng := rand.New(rand.NewPCG(5, 6))
	r := reuse.NewReplay(reuse.ReplayOptions{Period: 64, Options: reuse.Options{Seed: 1, Clock: reuse.ClockAccesses}})
	run := func(accesses int) {
		for range accesses {
			r.Access(reuse.Access{TID: 1, Addr: 0x1000 + 64*rng.Uint64N(n), Size: 8})
		}
	}
	c := NewReuse(oneTracker{t: r.Tracker}, nil, nil).WithCaches(512*64, 1536*64, 0)
	scrape := func() (map[string]float64, *dto.Histogram) {
		ch := make(chan prometheus.Metric, 100)
		c.Collect(ch)
		close(ch)
		ratios := map[string]float64{}
		var h *dto.Histogram
		for m := range ch {
			var out dto.Metric
			if err := m.Write(&out); err != nil {
				t.Fatal(err)
			}
			switch m.Desc() {
			case c.stack.missRatio:
				for _, lp := range out.GetLabel() {
					if lp.GetName() == "cache" {
						ratios[lp.GetValue()] = out.GetGauge().GetValue()
					}
				}
			case c.stack.histogram:
				h = out.GetHistogram()
			}
		}
		return ratios, h
	}
	run(200_000)
	_, first := scrape()
	run(800_000)
	ratios, h := scrape()
	above := func(lines float64) float64 {
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == lines {
				return 1 - float64(b.GetCumulativeCount())/float64(h.GetSampleCount())
			}
		}
		return -1
	}
	for name, lines := range map[string]float64{"L1d": 512, "L2": 1536} {
		want := 1 - lines/n
		if got := ratios[name]; math.Abs(got-want) > 0.05 {
			t.Errorf("%s (%v lines): miss ratio %.3f, want %.3f", name, lines, got, want)
		}
	}
	if _, ok := ratios["LLC"]; ok || len(ratios) != 2 {
		t.Errorf("miss ratios %v: want L1d and L2 only (no LLC size given)", ratios)
	}
	if got := above(512); math.Abs(got-0.75) > 0.05 {
		t.Errorf("histogram: %.3f of the accesses above 512 lines, want 0.75", got)
	}
	if h.GetSampleCount() != r.Tracker.Samples {
		t.Errorf("histogram count %d, samples %d", h.GetSampleCount(), r.Tracker.Samples)
	}
	for i, b := range first.GetBucket() {
		if h.GetBucket()[i].GetCumulativeCount() < b.GetCumulativeCount() {
			t.Errorf("bucket ≤ %v went down: %d, then %d", b.GetUpperBound(), b.GetCumulativeCount(), h.GetBucket()[i].GetCumulativeCount())
		}
	}
}

// The stack distances placed for a cgroup are forgotten once the source no
// longer reports it (its cgroup swept away after the grace period), with
// its series; a cgroup still reported keeps its buckets.
func TestReuseStackDistancesForgetCgroupsGone(t *testing.T) {
	tracker := func() *reuse.Tracker {
		tr := reuse.New(nopBackend{}, reuse.Options{Slots: 1, Clock: reuse.ClockAccesses})
		tr.Sample(reuse.Use{TID: 1, Addr: 0x1000, Size: 8, Kind: reuse.Write, Clock: 100})
		tr.Trapped(reuse.Hit{TID: 1, Clock: 164})
		return tr
	}
	src := &trackers{live: []*reuse.Tracker{tracker()}, gone: []*reuse.Tracker{tracker()}}
	c := NewReuse(src, nil, nil)
	histograms := func() int {
		ch := make(chan prometheus.Metric, 100)
		c.Collect(ch)
		close(ch)
		n := 0
		for m := range ch {
			if m.Desc() == c.stack.histogram {
				n++
			}
		}
		return n
	}
	if n := histograms(); n != 1 || len(c.stack.placed) != 1 {
		t.Fatalf("%d stack histograms, %d cgroups placed; want 1 and 1", n, len(c.stack.placed))
	}
	src.live, src.gone = nil, nil
	if n := histograms(); n != 0 || len(c.stack.placed) != 0 {
		t.Errorf("after the cgroup was forgotten: %d stack histograms, %d cgroups placed; want none", n, len(c.stack.placed))
	}
}

// label is the value of m's label name ("" where it has none).
func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// One trace's watches timed on two clocks (a trace replay's accesses and
// thread CPU time): the distances and their estimates come once per clock,
// labelled by it, and the raw counts once, so that sum() over a cgroup's
// series counts each trap once: here 2 samples, 1 reuse, 1 invalidation.
func TestReuseCountsWatchesOnceAcrossClocks(t *testing.T) {
	tracker := func(clock string, at uint64) *reuse.Tracker {
		tr := reuse.New(nopBackend{}, reuse.Options{Slots: 4, Clock: clock})
		tr.Sample(reuse.Use{TID: 1, Addr: 0x1000, Size: 8, Kind: reuse.Write, Clock: 100})
		tr.Trapped(reuse.Hit{TID: 1, Clock: 100 + at})
		tr.Sample(reuse.Use{TID: 1, Addr: 0x2000, Size: 8, Kind: reuse.Read, Clock: 200 + at})
		tr.Trapped(reuse.Hit{TID: 2, Clock: 300 + at}) // another thread's store
		return tr
	}
	src := &trackers{live: []*reuse.Tracker{tracker(reuse.ClockThreadCPU, 1<<20), tracker(reuse.ClockAccesses, 64)}}
	c := NewReuse(src, nil, nil)
	ch := make(chan prometheus.Metric, 200)
	c.Collect(ch)
	close(ch)
	sums, clocks := map[*prometheus.Desc]float64{}, map[*prometheus.Desc]map[string]bool{}
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		if out.Counter != nil {
			sums[m.Desc()] += out.GetCounter().GetValue()
		}
		if clocks[m.Desc()] == nil {
			clocks[m.Desc()] = map[string]bool{}
		}
		clocks[m.Desc()][label(&out, "clock")] = true
	}
	for d, want := range map[*prometheus.Desc]float64{c.samples: 2, c.invalidations: 1, c.watches: 2} {
		if sums[d] != want {
			t.Errorf("%v summed over the series: %v, want %v (each watch once)", d, sums[d], want)
		}
		if clocks[d][""] != true || len(clocks[d]) != 1 {
			t.Errorf("%v: clock labels %v, want none (raw counts are the clocks')", d, clocks[d])
		}
	}
	for d, want := range map[*prometheus.Desc]string{c.timeShare: reuse.ClockThreadCPU, c.eventShare: reuse.ClockAccesses} {
		if len(clocks[d]) != 1 || !clocks[d][want] {
			t.Errorf("%v: clocks %v, want only %s", d, clocks[d], want)
		}
	}
	if len(clocks[c.outcomeShare]) != 2 {
		t.Errorf("outcome shares for clocks %v, want both: each estimate weighs ages on its own clock", clocks[c.outcomeShare])
	}
}
