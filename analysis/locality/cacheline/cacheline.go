// Package cacheline finds the cache lines that threads share, by perf c2c's
// method: a bounded table of the hottest lines (ranked by loads that another
// core's cache served, HITM or peer, then by stores), each remembering
// which threads read and wrote which of its bytes. Every sampled access is
// classified as it arrives against the other threads' history on its
// line: true sharing when it touches bytes another thread wrote (or writes
// bytes another thread accessed), false sharing when the line is contended
// the same way but on bytes that do not overlap, neither when no other
// thread wrote. The counts are estimates, each sample weighing its
// sampling period. It is pure: the collectors and the perf.data reader
// feed it decoded samples.
package cacheline

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
)

// LineSize is the coherence granule of every x86 and Neoverse core.
const LineSize = 64

// MaxThreads is how many threads a line remembers; later ones are counted
// in the line's totals but not in its byte map.
const MaxThreads = 16

// Kind is an access's sharing class.
type Kind uint8

// Sharing kinds.
const (
	NotShared Kind = iota
	TrueSharing
	FalseSharing
)

func (k Kind) String() string {
	return [...]string{"none", "true_sharing", "false_sharing"}[k]
}

// Thread is one thread's history on a line: a bit per byte offset it read
// or wrote.
type Thread struct {
	PID, TID      uint32
	CPUs          uint64 // CPUs it was seen on (bit cpu%64)
	Read, Written uint64
	Samples       uint64
}

// Pair is two threads whose accesses met on a line (A < B).
type Pair struct{ A, B uint32 }

// MaxPairs is how many thread pairs a line counts; the events of further
// pairs are summed in OtherPairs.
const MaxPairs = 8

type pairCount struct {
	p Pair
	n uint64
}

// MaxCode is how many instructions (IP, offset, load or store) a line
// remembers, as perf c2c lists the code behind a contended line; samples
// of further ones are summed in OtherCode.
const MaxCode = 8

// Code is one instruction's accesses to a line.
type Code struct {
	IP      uint64
	Offset  uint8 // byte offset in the line
	Store   bool
	Samples uint64
	HITM    uint64 // of which loads that hit a modified line
	Peer    uint64 // of which loads a peer cache served
	// Loads and Cycles are a load's count and summed latency (Weight) by
	// LoadClass, perf c2c's "cycles" of the code behind a line.
	Loads  [NumLoadClasses]uint32
	Cycles [NumLoadClasses]uint64
}

// LoadClass is where a load was served as perf c2c averages its latency:
// the first of remote HITM, local HITM, remote peer, local peer that
// applies, else another load.
type LoadClass uint8

// Load classes.
const (
	RemoteHITMLoad LoadClass = iota
	LocalHITMLoad
	RemotePeerLoad
	LocalPeerLoad
	OtherLoad
	NumLoadClasses
)

// loadClass is the class of a load's contention.
func loadClass(c datasrc.Contention) LoadClass {
	switch {
	case c&datasrc.ContRemoteHITM != 0:
		return RemoteHITMLoad
	case c&datasrc.ContLocalHITM != 0:
		return LocalHITMLoad
	case c&datasrc.ContRemotePeer != 0:
		return RemotePeerLoad
	case c&datasrc.ContLocalPeer != 0:
		return LocalPeerLoad
	}
	return OtherLoad
}

// Line is one cache line's record, stored inline so that the table's hot
// path allocates nothing.
type Line struct {
	PID  uint32
	Addr uint64 // line address
	// Sample counts, and estimated events by sharing kind.
	Loads, Stores, LocalHITM, RemoteHITM uint64
	LocalPeer, RemotePeer                uint64
	Events                               [3]uint64 // by Kind
	OtherPairs                           uint64
	// Served counts its loads and stores by where they were served
	// (datasrc.C2CCount), perf c2c's table columns.
	Served [datasrc.NumC2CCounts]uint32
	// The threads, in parallel arrays so that classify's scan touches only
	// ids and masks: pid<<32|tid, the bytes each read and wrote.
	ids, reads, writes [MaxThreads]uint64
	cpus, samples      [MaxThreads]uint64
	last               [MaxThreads]uint64 // time of each thread's latest access
	nThreads           uint8
	pairs              [MaxPairs]pairCount
	nPairs             uint8
	code               [MaxCode]Code
	nCode              uint8
	OtherCode          uint64
	overflow           uint64 // accesses of threads beyond MaxThreads
}

// Code are the instructions that accessed the line, in order of first
// access.
func (l *Line) Code() []Code { return append([]Code(nil), l.code[:l.nCode]...) }

func (l *Line) addCode(a memaccess.Access) {
	off := uint8(a.Addr & (LineSize - 1))
	hitm, peer := uint64(0), uint64(0)
	if a.Contention.HITM() {
		hitm = 1
	}
	if a.Contention.Peer() {
		peer = 1
	}
	var c *Code
	for i := range l.code[:l.nCode] {
		if k := &l.code[i]; k.IP == a.IP && k.Offset == off && k.Store == a.Store {
			c = k
			break
		}
	}
	if c == nil {
		if int(l.nCode) == MaxCode {
			l.OtherCode++
			return
		}
		c = &l.code[l.nCode]
		*c = Code{IP: a.IP, Offset: off, Store: a.Store}
		l.nCode++
	}
	c.Samples++
	c.HITM += hitm
	c.Peer += peer
	if !a.Store {
		k := loadClass(a.Contention)
		c.Loads[k]++
		c.Cycles[k] += a.Weight
	}
}

// Threads are the threads that touched the line, in order of first touch.
func (l *Line) Threads() []Thread {
	out := make([]Thread, l.nThreads)
	for i := range out {
		out[i] = Thread{PID: uint32(l.ids[i] >> 32), TID: uint32(l.ids[i]), CPUs: l.cpus[i],
			Read: l.reads[i], Written: l.writes[i], Samples: l.samples[i]}
	}
	return out
}

// Pairs are the thread pairs whose accesses met on the line, by
// estimated events.
func (l *Line) Pairs() map[Pair]uint64 {
	out := make(map[Pair]uint64, l.nPairs)
	for _, pc := range l.pairs[:l.nPairs] {
		out[pc.p] = pc.n
	}
	return out
}

func (l *Line) addPair(p Pair, n uint64) {
	for i := range l.pairs[:l.nPairs] {
		if l.pairs[i].p == p {
			l.pairs[i].n += n
			return
		}
	}
	if int(l.nPairs) < MaxPairs {
		l.pairs[l.nPairs] = pairCount{p, n}
		l.nPairs++
		return
	}
	l.OtherPairs += n
}

// Costly is how many of the line's loads another core's cache served:
// HITM and peer-snoop samples, which perf c2c ranks lines by (HITM on x86,
// peer on Arm, whose data sources have no HITM).
func (l *Line) Costly() uint64 { return l.LocalHITM + l.RemoteHITM + l.LocalPeer + l.RemotePeer }

// Hotter ranks lines as perf c2c does: by Costly loads, then by stores
// (positive: a is hotter than b). Two keys, not one packed number: a packed
// score lets enough stores outrank a HITM.
func Hotter(a, b *Line) int {
	if c := cmp.Compare(a.Costly(), b.Costly()); c != 0 {
		return c
	}
	return cmp.Compare(a.Stores, b.Stores)
}

// key is a line of a process: the same virtual address in two processes
// is two lines.
type key struct {
	pid  uint32
	addr uint64
}

// Table holds up to a bound of lines and the totals of every access. The
// lines live in one slab; an evicted line's slot is reused.
type Table struct {
	max    int
	window uint64 // ns; 0: a thread's bytes count for as long as the line is held
	slab   []Line
	free   []int32
	lines  map[key]int32 // → slab index
	// Totals over every access, including those of evicted lines.
	Totals Totals
}

// Totals are the table-wide counts.
type Totals struct {
	Loads, Stores, LocalHITM, RemoteHITM uint64
	LocalPeer, RemotePeer                uint64
	Served                               [datasrc.NumC2CCounts]uint64
	NoAddr                               uint64    // samples without a data address
	Events                               [3]uint64 // estimated events by Kind
	Evicted                              uint64    // lines dropped to keep the bound
}

// New makes a table of at most maxLines lines.
func New(maxLines int) *Table {
	n := max(maxLines, 2)
	return &Table{max: n, slab: make([]Line, 0, n), lines: make(map[key]int32, n)}
}

// SetWindow makes a thread's bytes on a line count only for window after
// its latest access there (by the samples' timestamps): an always-on
// exporter should not call an access sharing because another thread
// touched the line minutes ago. perf c2c, reporting on one recording,
// keeps them for the whole recording, as the table does by default.
func (t *Table) SetWindow(window time.Duration) { t.window = uint64(max(window, 0)) }

// Add classifies a and records it; it returns the access's kind.
func (t *Table) Add(a memaccess.Access) Kind {
	if a.Addr == 0 {
		t.Totals.NoAddr++
		return NotShared
	}
	k := key{a.PID, a.Addr &^ (LineSize - 1)}
	var l *Line
	if i, ok := t.lines[k]; ok {
		l = &t.slab[i]
	} else {
		l = t.newLine(k)
	}
	if a.Store {
		l.Stores++
		t.Totals.Stores++
	} else {
		l.Loads++
		t.Totals.Loads++
	}
	if c := a.Contention; c != 0 {
		count := func(bit datasrc.Contention, line, total *uint64) {
			if c&bit != 0 {
				*line++
				*total++
			}
		}
		count(datasrc.ContLocalHITM, &l.LocalHITM, &t.Totals.LocalHITM)
		count(datasrc.ContRemoteHITM, &l.RemoteHITM, &t.Totals.RemoteHITM)
		count(datasrc.ContLocalPeer, &l.LocalPeer, &t.Totals.LocalPeer)
		count(datasrc.ContRemotePeer, &l.RemotePeer, &t.Totals.RemotePeer)
	}
	for c := a.Served; c != 0; c &= c - 1 {
		k := bits.TrailingZeros16(uint16(c))
		l.Served[k]++
		t.Totals.Served[k]++
	}
	kind, partner := l.classify(a, t.window)
	l.addCode(a)
	l.Events[kind] += a.Period
	t.Totals.Events[kind] += a.Period
	if kind != NotShared {
		l.addPair(Pair{min(a.TID, partner), max(a.TID, partner)}, a.Period)
	}
	return kind
}

// newLine takes a slot for line k, evicting the colder half when full.
func (t *Table) newLine(k key) *Line {
	if len(t.lines) >= t.max {
		t.evict()
	}
	var i int32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.slab = append(t.slab, Line{})
		i = int32(len(t.slab) - 1)
	}
	l := &t.slab[i]
	// Reset what a line counts; the thread and pair arrays are written
	// before they are read again, so the ~1 KiB of them is not cleared.
	l.PID, l.Addr = k.pid, k.addr
	l.Loads, l.Stores, l.LocalHITM, l.RemoteHITM, l.OtherPairs, l.overflow = 0, 0, 0, 0, 0, 0
	l.LocalPeer, l.RemotePeer = 0, 0
	l.Served = [datasrc.NumC2CCounts]uint32{}
	l.Events = [3]uint64{}
	l.nThreads, l.nPairs, l.nCode, l.OtherCode = 0, 0, 0, 0
	t.lines[k] = i
	return l
}

// bytes is the mask of the bytes an access touches within its line.
func bytes(a memaccess.Access) uint64 {
	off := a.Addr & (LineSize - 1)
	w := uint64(max(a.Size, 1))
	if off+w > LineSize { // a split access: this line's part
		w = LineSize - off
	}
	if w == 64 {
		return ^uint64(0)
	}
	return (1<<w - 1) << off
}

// classify compares a with the other threads' history on l, then adds it
// to its own thread's. partner is the thread it met: of those whose bytes
// make it sharing of its kind, the one that touched the line last, whose
// cache the line most likely came from (the first of them where their
// times tie). The first thread on the line met everyone's accesses
// before: a benchmark's four threads on one line showed two pairs of six.
func (l *Line) classify(a memaccess.Access, window uint64) (Kind, uint32) {
	m := bytes(a)
	me := uint64(a.PID)<<32 | uint64(a.TID)
	stale := func(i int) bool { return window > 0 && a.Time > l.last[i]+window }
	var readMask uint64 // others' reads matter to a write
	if a.Store {
		readMask = ^uint64(0)
	}
	kind, met := NotShared, -1
	self := -1
	n := int(l.nThreads)
	for i := 0; i < n; i++ {
		if l.ids[i] == me {
			self = i
			continue
		}
		if stale(i) {
			continue
		}
		conflict := l.writes[i] | l.reads[i]&readMask
		// True sharing outranks false; within a kind the latest toucher.
		switch {
		case conflict == 0:
		case conflict&m != 0:
			if kind != TrueSharing || l.last[i] > l.last[met] {
				kind, met = TrueSharing, i
			}
		case kind == NotShared || kind == FalseSharing && l.last[i] > l.last[met]:
			kind, met = FalseSharing, i
		}
	}
	partner := uint32(0)
	if met >= 0 {
		partner = uint32(l.ids[met])
	}
	if self < 0 {
		if n >= MaxThreads {
			l.overflow++
			return kind, partner
		}
		self = n
		l.ids[n], l.reads[n], l.writes[n], l.cpus[n], l.samples[n] = me, 0, 0, 0, 0
		l.nThreads++
	} else if stale(self) { // its old bytes are history: start over
		l.reads[self], l.writes[self] = 0, 0
	}
	l.last[self] = max(l.last[self], a.Time)
	l.samples[self]++
	l.cpus[self] |= 1 << (a.CPU % 64)
	if a.Store {
		l.writes[self] |= m
	} else {
		l.reads[self] |= m
	}
	return kind, partner
}

// evict drops the colder half of the lines in one pass, so that a full
// table costs O(log n) per new line rather than a scan each time.
func (t *Table) evict() {
	all := make([]int32, 0, len(t.lines))
	for _, i := range t.lines {
		all = append(all, i)
	}
	slices.SortFunc(all, func(a, b int32) int { return Hotter(&t.slab[a], &t.slab[b]) })
	for _, i := range all[:len(all)/2] {
		l := &t.slab[i]
		delete(t.lines, key{l.PID, l.Addr})
		t.free = append(t.free, i)
		t.Totals.Evicted++
	}
}

// Top returns the n hottest lines, hottest first (ties by address).
func (t *Table) Top(n int) []*Line { return t.TopBy(n, DisplayAny) }

// Display is what a report ranks lines by, as perf c2c report's --display:
// any load another core's cache served (HITM or peer, the table's own
// order), or one kind of them, in which case only the lines with some of
// that kind are listed, as perf lists them.
type Display uint8

// Displays, by perf c2c's names but the first.
const (
	DisplayAny        Display = iota // "any": HITM and peer loads
	DisplayTotalHITM                 // "tot"
	DisplayLocalHITM                 // "lcl"
	DisplayRemoteHITM                // "rmt"
	DisplayPeer                      // "peer"
)

// DisplayNames are the displays' names, by Display.
var DisplayNames = []string{"any", "tot", "lcl", "rmt", "peer"}

// ParseDisplay reads a display's name.
func ParseDisplay(name string) (Display, error) {
	if i := slices.Index(DisplayNames, name); i >= 0 {
		return Display(i), nil
	}
	return 0, fmt.Errorf("display %q: want one of %v", name, DisplayNames)
}

// count is a line's loads of the display's kind.
func (d Display) count(l *Line) uint64 {
	switch d {
	case DisplayTotalHITM:
		return l.LocalHITM + l.RemoteHITM
	case DisplayLocalHITM:
		return l.LocalHITM
	case DisplayRemoteHITM:
		return l.RemoteHITM
	case DisplayPeer:
		return l.LocalPeer + l.RemotePeer
	}
	return l.Costly()
}

// TopBy returns the n lines with the most loads of display's kind, then
// the hottest, first (ties by address).
func (t *Table) TopBy(n int, display Display) []*Line {
	out := make([]*Line, 0, len(t.lines))
	for _, i := range t.lines {
		if l := &t.slab[i]; display == DisplayAny || display.count(l) > 0 {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b *Line) int {
		if c := cmp.Compare(display.count(b), display.count(a)); c != 0 {
			return c
		}
		if c := Hotter(b, a); c != 0 {
			return c
		}
		if c := cmp.Compare(a.PID, b.PID); c != 0 {
			return c
		}
		return cmp.Compare(a.Addr, b.Addr)
	})
	return out[:min(n, len(out))]
}

// Len is the number of lines held.
func (t *Table) Len() int { return len(t.lines) }
