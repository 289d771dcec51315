// Package cacheline finds the cache lines that threads share, by perf c2c's
// method: a bounded table of the hottest lines (ranked by HITM loads, then
// stores), each remembering which threads read and wrote which of its
// bytes. Every sampled access is classified as it arrives against the
// other threads' history on its line: true sharing when it touches bytes
// another thread wrote (or writes bytes another thread accessed), false
// sharing when the line is contended the same way but on bytes that do
// not overlap, neither when no other thread wrote. The counts are
// estimates, each sample weighing its sampling period. It is pure: the
// collectors and the perf.data reader feed it decoded samples.
package cacheline

import (
	"cmp"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/datasrc"
)

// LineSize is the coherence granule of every x86 and Neoverse core.
const LineSize = 64

// MaxThreads is how many threads a line remembers; later ones are counted
// in the line's totals but not in its byte map.
const MaxThreads = 16

// Access is one sampled load or store.
type Access struct {
	Addr     uint64 // data virtual address
	Size     uint8  // access width in bytes where the record gives it, else 0 (one byte)
	PID, TID uint32
	CPU      uint32
	Store    bool
	HITM     datasrc.HITM
	Period   uint64 // events this sample stands for
}

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

// Line is one cache line's record.
type Line struct {
	PID     uint32
	Addr    uint64 // line address
	Threads []Thread
	// Sample counts, and estimated events by sharing kind.
	Loads, Stores, LocalHITM, RemoteHITM uint64
	Events                               [3]uint64 // by Kind
	Pairs                                map[Pair]uint64
	overflow                             uint64 // accesses of threads beyond MaxThreads
}

// Score ranks lines as perf c2c does: HITM loads first, then stores.
func (l *Line) Score() uint64 { return (l.LocalHITM+l.RemoteHITM)<<20 + l.Stores }

// key is a line of a process: the same virtual address in two processes
// is two lines.
type key struct {
	pid  uint32
	addr uint64
}

// Table holds up to a bound of lines and the totals of every access.
type Table struct {
	max   int
	lines map[key]*Line
	// Totals over every access, including those of evicted lines.
	Totals Totals
}

// Totals are the table-wide counts.
type Totals struct {
	Loads, Stores, LocalHITM, RemoteHITM uint64
	NoAddr                               uint64    // samples without a data address
	Events                               [3]uint64 // estimated events by Kind
	Evicted                              uint64    // lines dropped to keep the bound
}

// New makes a table of at most maxLines lines.
func New(maxLines int) *Table {
	return &Table{max: max(maxLines, 2), lines: make(map[key]*Line)}
}

// Add classifies a and records it; it returns the access's kind.
func (t *Table) Add(a Access) Kind {
	if a.Addr == 0 {
		t.Totals.NoAddr++
		return NotShared
	}
	k := key{a.PID, a.Addr &^ (LineSize - 1)}
	l := t.lines[k]
	if l == nil {
		if len(t.lines) >= t.max {
			t.evict()
		}
		l = &Line{PID: a.PID, Addr: k.addr}
		t.lines[k] = l
	}
	if a.Store {
		l.Stores++
		t.Totals.Stores++
	} else {
		l.Loads++
		t.Totals.Loads++
	}
	switch a.HITM {
	case datasrc.LocalHITM:
		l.LocalHITM++
		t.Totals.LocalHITM++
	case datasrc.RemoteHITM:
		l.RemoteHITM++
		t.Totals.RemoteHITM++
	}
	kind, partner := l.classify(a)
	l.Events[kind] += a.Period
	t.Totals.Events[kind] += a.Period
	if kind != NotShared {
		if l.Pairs == nil {
			l.Pairs = map[Pair]uint64{}
		}
		p := Pair{min(a.TID, partner), max(a.TID, partner)}
		l.Pairs[p] += a.Period
	}
	return kind
}

// bytes is the mask of the bytes an access touches within its line.
func bytes(a Access) uint64 {
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
// to its own thread's. partner is the thread it met.
func (l *Line) classify(a Access) (Kind, uint32) {
	m := bytes(a)
	kind, partner := NotShared, uint32(0)
	self := -1
	for i := range l.Threads {
		o := &l.Threads[i]
		if o.TID == a.TID && o.PID == a.PID {
			self = i
			continue
		}
		conflict := o.Written // what another thread wrote matters to any access
		if a.Store {
			conflict |= o.Read // a write matters to what others read
		}
		switch {
		case conflict&m != 0:
			kind, partner = TrueSharing, o.TID
		case conflict != 0 && kind == NotShared:
			kind, partner = FalseSharing, o.TID
		}
	}
	if self < 0 {
		if len(l.Threads) >= MaxThreads {
			l.overflow++
			return kind, partner
		}
		l.Threads = append(l.Threads, Thread{PID: a.PID, TID: a.TID})
		self = len(l.Threads) - 1
	}
	t := &l.Threads[self]
	t.Samples++
	t.CPUs |= 1 << (a.CPU % 64)
	if a.Store {
		t.Written |= m
	} else {
		t.Read |= m
	}
	return kind, partner
}

// evict drops the colder half of the lines in one pass, so that a full
// table costs O(log n) per new line rather than a scan each time.
func (t *Table) evict() {
	all := make([]key, 0, len(t.lines))
	for k := range t.lines {
		all = append(all, k)
	}
	slices.SortFunc(all, func(a, b key) int { return cmp.Compare(t.lines[a].Score(), t.lines[b].Score()) })
	for _, k := range all[:len(all)/2] {
		delete(t.lines, k)
		t.Totals.Evicted++
	}
}

// Top returns the n hottest lines, hottest first (ties by address).
func (t *Table) Top(n int) []*Line {
	out := make([]*Line, 0, len(t.lines))
	for _, l := range t.lines {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *Line) int {
		if c := cmp.Compare(b.Score(), a.Score()); c != 0 {
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
