// Package samplestat aggregates decoded samples into what the exporter
// serves: per sampling event the samples, lost records and throttles; per
// memory access class (op, source, snoop) the samples and the accesses they
// stand for (samples × period); the load latency as a native histogram;
// and the shared cache line table. It is pure and built for the reader's
// hot path: fixed arrays indexed by class, no allocation per sample, one
// lock taken per batch of records rather than per record.
package samplestat

import (
	"math"
	"sync"

	"github.com/pmu-exporter/pmu_exporter/cacheline"
	"github.com/pmu-exporter/pmu_exporter/datasrc"
	"github.com/pmu-exporter/pmu_exporter/perfrecord"
)

// Schema is the native histogram schema of the latency: 2^(1/8) growth,
// bucket boundaries 9% apart.
const Schema = 3

const (
	numOps    = 5 // load, store, prefetch, exec, na
	numSnoops = 5 // hitm, hit, miss, none, na
)

// Ops and Snoops are the label values, by index.
var (
	Ops    = [numOps]string{"load", "store", "prefetch", "exec", "na"}
	Snoops = [numSnoops]string{"hitm", "hit", "miss", "none", "na"}
)

// Class counts one (op, source, snoop).
type Class struct {
	Samples, Accesses uint64
}

// Event is one sampling event's totals.
type Event struct {
	Samples, Lost, Throttled, Filtered uint64
}

// Latency is the load latency histogram.
type Latency struct {
	Count   uint64
	Sum     float64
	Zero    uint64
	Buckets map[int]int64 // index under Schema → count
}

// Stats is everything aggregated so far.
type Stats struct {
	mu      sync.Mutex
	events  []Event
	classes [numOps][datasrc.NumSources][numSnoops]Class
	latency Latency
	lines   *cacheline.Table
	lost    uint64 // LOST records not attributable to an event
}

// New makes the stats of n events, with a cache line table of maxLines.
func New(n, maxLines int) *Stats {
	return &Stats{events: make([]Event, n), latency: Latency{Buckets: map[int]int64{}}, lines: cacheline.New(maxLines)}
}

// Batch is a locked view for adding many records at once.
type Batch struct{ s *Stats }

// Lock starts a batch; Unlock ends it.
func (s *Stats) Lock() Batch { s.mu.Lock(); return Batch{s} }

// Unlock ends the batch.
func (b Batch) Unlock() { b.s.mu.Unlock() }

// Sample adds a sample of event ev. memory says whether the event samples
// loads and stores; addrOnly drops samples without a data address (IBS op
// samples every op). period is the sample's weight when the record has no
// PERIOD.
func (b Batch) Sample(ev int, s *perfrecord.Sample, memory, addrOnly bool) {
	st := b.s
	e := &st.events[ev]
	if addrOnly && s.Addr == 0 {
		e.Filtered++
		return
	}
	e.Samples++
	if !memory {
		return
	}
	d := datasrc.Decode(s.DataSrc)
	op := opIndex(d)
	c := &st.classes[op][d.Source()][snoopIndex(d)]
	c.Samples++
	c.Accesses += s.Period
	if op == 0 && s.Weight > 0 {
		st.latency.observe(s.Weight)
	}
	if a, ok := cacheline.AccessOf(s, s.Period); ok {
		st.lines.Add(a)
	}
}

// Lost adds n records lost by event ev (-1: not attributable).
func (b Batch) Lost(ev int, n uint64) {
	if ev < 0 || ev >= len(b.s.events) {
		b.s.lost += n
		return
	}
	b.s.events[ev].Lost += n
}

// Throttled counts a THROTTLE record of event ev.
func (b Batch) Throttled(ev int) {
	if ev >= 0 && ev < len(b.s.events) {
		b.s.events[ev].Throttled++
	}
}

// opIndex is OpName's index in Ops.
func opIndex(d datasrc.DataSrc) int {
	switch {
	case d.Op&datasrc.OpLoad != 0:
		return 0
	case d.Op&datasrc.OpStore != 0:
		return 1
	case d.Op&datasrc.OpPfetch != 0:
		return 2
	case d.Op&datasrc.OpExec != 0:
		return 3
	}
	return 4
}

// snoopIndex is SnoopName's index in Snoops.
func snoopIndex(d datasrc.DataSrc) int {
	switch {
	case d.Snoop&datasrc.SnoopHITM != 0:
		return 0
	case d.Snoop&datasrc.SnoopHit != 0:
		return 1
	case d.Snoop&datasrc.SnoopMiss != 0:
		return 2
	case d.Snoop&datasrc.SnoopNone != 0:
		return 3
	}
	return 4
}

// bucketOf is the native histogram bucket of v under Schema: bucket k
// holds (2^((k-1)/8), 2^(k/8)].
func bucketOf(v float64) int {
	frac, exp := math.Frexp(v) // v = frac × 2^exp, frac in [0.5, 1)
	// k = ceil(8 × log2(frac)), in [-8, 0]: frac ≤ 2^((k-1)/8) moves it down.
	k := 0
	for k > -8 && frac <= bounds[1-k] {
		k--
	}
	return exp*(1<<Schema) + k
}

// bounds[j] = 2^(-j/8): frac ≤ bounds[j] means log2(frac) ≤ -j/8.
var bounds = func() [9]float64 {
	var b [9]float64
	for j := range b {
		b[j] = math.Exp2(-float64(j) / (1 << Schema))
	}
	return b
}()

// smallBuckets caches the buckets of the latencies PEBS and IBS report
// most, so the hot path skips Frexp.
var smallBuckets = func() [4096]int32 {
	var t [4096]int32
	for v := 1; v < len(t); v++ {
		t[v] = int32(bucketOf(float64(v)))
	}
	return t
}()

func (l *Latency) observe(w uint64) {
	l.Count++
	l.Sum += float64(w)
	if w < uint64(len(smallBuckets)) {
		l.Buckets[int(smallBuckets[w])]++
		return
	}
	l.Buckets[bucketOf(float64(w))]++
}

// Snapshot is a copy of the stats for one scrape.
type Snapshot struct {
	Events  []Event
	Classes [numOps][datasrc.NumSources][numSnoops]Class
	Latency Latency
	Sharing [3]uint64 // estimated events by cacheline.Kind
	Lost    uint64    // not attributable to an event
}

// Snapshot copies the totals.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Events: append([]Event(nil), s.events...), Classes: s.classes, Lost: s.lost,
		Sharing: s.lines.Totals.Events}
	snap.Latency = s.latency
	snap.Latency.Buckets = make(map[int]int64, len(s.latency.Buckets))
	for k, v := range s.latency.Buckets {
		snap.Latency.Buckets[k] = v
	}
	return snap
}

// Cachelines reports the table's n hottest lines.
func (s *Stats) Cachelines(n int, symbol func(pid uint32, addr uint64) string) cacheline.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines.Report(n, symbol)
}
