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
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// Schema is the native histogram schema of the latency: 2^(1/8) growth,
// bucket boundaries 9% apart.
const Schema = 3

// The classes' op and snoop, as datasrc classifies them.
const (
	numOps    = int(datasrc.NumOpClasses)
	numSnoops = int(datasrc.NumSnoopClasses)
)

// Ops and Snoops are the label values, by index: datasrc's.
var (
	Ops    = datasrc.OpNames
	Snoops = datasrc.SnoopNames
)

// Class counts one (op, source, snoop).
type Class struct {
	Samples, Accesses uint64
}

// Event is one sampling event's totals. AuxLost counts the AUX records
// (an AUX event's: Arm SPE) that say records were lost, by AuxLoss.
type Event struct {
	Samples, Lost, Throttled, Filtered uint64
	AuxLost                            [NumAuxLosses]uint64
}

// AuxLosses are how an AUX event loses records, by the flags of the
// kernel's AUX record (PERF_AUX_FLAG_*): truncated, the AUX area was full
// (the event stopped until the reader enabled it again); collision, the
// unit's records collided (SPE: its buffer management event said so);
// partial, the chunk has gaps.
var AuxLosses = [NumAuxLosses]string{"truncated", "collision", "partial"}

// NumAuxLosses is the number of AuxLosses.
const NumAuxLosses = 3

// Latency is the load latency histogram.
type Latency struct {
	Count   uint64
	Sum     float64
	Zero    uint64
	Buckets map[int]int64 // index under Schema → count
}

// latencyBuckets holds the buckets of latencies from 1 to 2^32 cycles
// (index 0 to 256 under Schema) in an array: no map on the hot path.
type latencyBuckets struct {
	count uint64
	sum   float64
	n     [32<<Schema + 1]uint64
}

// Stats is everything aggregated so far.
type Stats struct {
	mu      sync.Mutex
	events  []Event
	classes [numClasses]Class // by (op × sources + source) × snoops + snoop
	latency latencyBuckets
	lines   *cacheline.Table
	// seen caches the class of recent data_src values: a PMU reports few
	// distinct ones, and classifying one takes a dozen branches.
	seen [256]classEntry
	lost uint64 // LOST records not attributable to an event
	// errors counts records that could not be read, by reason.
	errors map[string]uint64
	// cgroups is the per-cgroup share (PERF_SAMPLE_CGROUP ids), bounded by
	// maxCgroups; samples of cgroups beyond it go to OtherCgroup.
	cgroups    map[uint64]*CgroupStats
	maxCgroups int
}

// OtherCgroup is the id of the cgroups beyond the bound.
const OtherCgroup = ^uint64(0)

// CgroupStats is one cgroup's share of the samples: per event, by memory
// access class (op and source: the snoop is left out to keep the series
// per cgroup few), and its accesses to shared lines by kind.
type CgroupStats struct {
	Samples []uint64
	Classes [numOps][datasrc.NumSources]Class
	Sharing [3]uint64
}

// TrackCgroups keeps per-cgroup totals for up to max cgroups, from samples
// that carry PERF_SAMPLE_CGROUP.
func (s *Stats) TrackCgroups(max int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cgroups, s.maxCgroups = map[uint64]*CgroupStats{}, max
}

// SetSharingWindow is cacheline.Table.SetWindow for the stats' table.
func (s *Stats) SetSharingWindow(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines.SetWindow(d)
}

// CgroupIDs lists the cgroups with totals of their own.
func (s *Stats) CgroupIDs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint64, 0, len(s.cgroups))
	for id := range s.cgroups {
		if id != OtherCgroup {
			ids = append(ids, id)
		}
	}
	return ids
}

// ForgetCgroups drops the totals of cgroups that are gone, so that their
// series end and their places go to new cgroups.
func (s *Stats) ForgetCgroups(ids []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.cgroups, id)
	}
}

func (st *Stats) cgroupOf(id uint64) *CgroupStats {
	c := st.cgroups[id]
	if c == nil {
		own := len(st.cgroups) // cgroups with series of their own: "other" is not one
		if _, ok := st.cgroups[OtherCgroup]; ok {
			own--
		}
		if own >= st.maxCgroups && id != OtherCgroup {
			return st.cgroupOf(OtherCgroup)
		}
		c = &CgroupStats{Samples: make([]uint64, len(st.events))}
		st.cgroups[id] = c
	}
	return c
}

// New makes the stats of n events, with a cache line table of maxLines.
func New(n, maxLines int) *Stats {
	return &Stats{events: make([]Event, n), lines: cacheline.New(maxLines)}
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
	b.sample(ev, s, memory, addrOnly, 0, true)
}

// Precise adds a precise memory sample that the address sampler's
// detector also takes: as Sample, with the access width its record lacks
// (decoded from the instruction at its IP; 0: unknown, one byte) for the
// table's byte ranges, but its cgroup's sharing is the detector's, added
// by Access once it has classified the access.
func (b Batch) Precise(ev int, s *perfrecord.Sample, addrOnly bool, width uint8) {
	b.sample(ev, s, true, addrOnly, width, false)
}

func (b Batch) sample(ev int, s *perfrecord.Sample, memory, addrOnly bool, width uint8, cgSharing bool) {
	st := b.s
	e := &st.events[ev]
	if addrOnly && s.Addr == 0 {
		e.Filtered++
		return
	}
	e.Samples++
	var cg *CgroupStats
	if st.cgroups != nil && s.Has&unix.PERF_SAMPLE_CGROUP != 0 {
		cg = st.cgroupOf(s.Cgroup)
		cg.Samples[ev]++
	}
	if !memory {
		return
	}
	k := b.classify(ev, s)
	if cg != nil {
		c := &cg.Classes[k/(int(datasrc.NumSources)*numSnoops)][k/numSnoops%int(datasrc.NumSources)]
		c.Samples++
		c.Accesses += s.Period
	}
	if a, ok := memaccess.FromSample(s, s.Period); ok {
		a.Size = width
		kind := st.lines.Add(a)
		if cg != nil && cgSharing {
			cg.Sharing[kind] += a.Period
		}
	}
}

// Access adds a sample of event ev that the address sampler resolved to an
// access (a timer sample decoded): it counts as the event's sample and
// goes into the shared-line table; cgroup is its cgroup id when has, and
// kind what ComDetective's detector found of it, which the cgroup's
// sharing totals take.
func (b Batch) Access(ev int, a *memaccess.Access, cgroup uint64, has bool, kind cacheline.Kind) {
	st := b.s
	st.events[ev].Samples++
	st.lines.Add(*a)
	if st.cgroups != nil && has {
		cg := st.cgroupOf(cgroup)
		cg.Samples[ev]++
		cg.Sharing[kind] += a.Period
	}
}

// Detected adds what ComDetective's detector found of a precise sample's
// access (Precise took the sample) to its cgroup's sharing totals.
func (b Batch) Detected(a *memaccess.Access, cgroup uint64, has bool, kind cacheline.Kind) {
	if b.s.cgroups != nil && has {
		b.s.cgroupOf(cgroup).Sharing[kind] += a.Period
	}
}

// Unresolved counts a sample of event ev the address sampler could not
// resolve: it is still the event's sample.
func (b Batch) Unresolved(ev int) { b.s.events[ev].Samples++ }

// classEntry is a cached classification: the data_src word, and its
// class as one index into Stats.classes (op, source, snoop), +1 so that
// zero means empty.
type classEntry struct {
	src   uint64
	class uint32
}

const numClasses = numOps * int(datasrc.NumSources) * numSnoops

// classOf is data_src v's class index, through the cache.
func (st *Stats) classOf(v uint64) int {
	e := &st.seen[(v^v>>19^v>>33)&255]
	if e.class == 0 || e.src != v {
		d := datasrc.Decode(v)
		e.src = v
		e.class = uint32((int(d.OpClass())*int(datasrc.NumSources)+int(d.Source()))*numSnoops+int(d.SnoopClass())) + 1
	}
	return int(e.class - 1)
}

// classify counts a memory sample by class and latency, and returns the class.
func (b Batch) classify(_ int, s *perfrecord.Sample) int {
	k := b.s.classOf(s.DataSrc)
	c := &b.s.classes[k%numClasses]
	c.Samples++
	c.Accesses += s.Period
	if k < int(datasrc.NumSources)*numSnoops && s.Weight > 0 { // op load
		b.s.latency.observe(s.Weight)
	}
	return k
}

// Lost adds n records lost by event ev (-1: not attributable).
func (b Batch) Lost(ev int, n uint64) {
	if ev < 0 || ev >= len(b.s.events) {
		b.s.lost += n
		return
	}
	b.s.events[ev].Lost += n
}

// Error counts a record that could not be read, by reason.
func (b Batch) Error(reason string) {
	if b.s.errors == nil {
		b.s.errors = map[string]uint64{}
	}
	b.s.errors[reason]++
}

// Filtered counts n records of event ev that made no sample: an SPE
// record of an operation that is neither a load nor a store.
func (b Batch) Filtered(ev int, n uint64) {
	if ev >= 0 && ev < len(b.s.events) {
		b.s.events[ev].Filtered += n
	}
}

// AuxFlags counts an AUX record of event ev by the losses its flags
// (PERF_AUX_FLAG_*) say.
func (b Batch) AuxFlags(ev int, flags uint64) {
	if ev < 0 || ev >= len(b.s.events) {
		return
	}
	for i, bit := range [NumAuxLosses]uint64{perfrecord.AuxTruncated, perfrecord.AuxCollision, perfrecord.AuxPartial} {
		if flags&bit != 0 {
			b.s.events[ev].AuxLost[i]++
		}
	}
}

// Throttled counts a THROTTLE record of event ev.
func (b Batch) Throttled(ev int) {
	if ev >= 0 && ev < len(b.s.events) {
		b.s.events[ev].Throttled++
	}
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

func (l *latencyBuckets) observe(w uint64) {
	l.count++
	l.sum += float64(w)
	k := 0
	if w < uint64(len(smallBuckets)) {
		k = int(smallBuckets[w])
	} else {
		k = bucketOf(float64(w))
	}
	l.n[min(k, len(l.n)-1)]++ // beyond 2^32 cycles: the last bucket
}

// export turns the array into the sparse form client_golang takes.
func (l *latencyBuckets) export() Latency {
	out := Latency{Count: l.count, Sum: l.sum, Buckets: map[int]int64{}}
	for k, n := range l.n {
		if n > 0 {
			out.Buckets[k] = int64(n)
		}
	}
	return out
}

// Snapshot is a copy of the stats for one scrape.
type Snapshot struct {
	Events  []Event
	Classes [numOps][datasrc.NumSources][numSnoops]Class
	Latency Latency
	Sharing [3]uint64 // estimated events by cacheline.Kind
	Lost    uint64    // not attributable to an event
	Cgroups map[uint64]CgroupStats
	Errors  map[string]uint64 // records not read, by reason
}

// Snapshot copies the totals.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Events: append([]Event(nil), s.events...), Lost: s.lost, Sharing: s.lines.Totals.Events}
	for k, c := range s.classes {
		snap.Classes[k/(int(datasrc.NumSources)*numSnoops)][k/numSnoops%int(datasrc.NumSources)][k%numSnoops] = c
	}
	snap.Latency = s.latency.export()
	snap.Errors = make(map[string]uint64, len(s.errors))
	for k, v := range s.errors {
		snap.Errors[k] = v
	}
	if s.cgroups != nil {
		snap.Cgroups = make(map[uint64]CgroupStats, len(s.cgroups))
		for id, c := range s.cgroups {
			cc := *c
			cc.Samples = append([]uint64(nil), c.Samples...)
			snap.Cgroups[id] = cc
		}
	}
	return snap
}

// Events copies the per-event totals alone, for the governor: a Snapshot
// also copies the classes, histogram and cgroups.
func (s *Stats) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Cachelines reports the table's n hottest lines, ranked by display.
func (s *Stats) Cachelines(n int, display cacheline.Display, symbol func(pid uint32, addr uint64) string) cacheline.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines.ReportBy(n, display, symbol)
}
