package reuse

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Case is a reuse benchmark in the manner of RIBench (thesis Listing 6.1,
// notes §5 item 10): for each distance Distances[i] a thread runs a phase
// that walks the same Distances[i] 8-byte locations Counts[i]+1 times in a
// row, so it makes Counts[i]·Distances[i] reuse pairs, each exactly
// Distances[i] accesses apart on the thread's clock (the last walk's
// locations are not reused: the next phase takes fresh ones). Phases run
// Outer times each, in a seeded shuffled order. With Invalidate > 0, that
// share of walks has every location stored to by another thread between
// its use and its reuse: right after the use, or with StoreLate at a
// uniformly random point of the reuse interval (a writer that is not in
// step with the owner: an invalidation at any age up to the reuse's).
type Case struct {
	Name       string
	Distances  []uint64
	Counts     []int
	Invalidate float64
	StoreLate  bool
	Outer      int
}

// The cases of the thesis' Tables 6.4–6.7 at distances 64 to 1024 (the
// thesis: 1K to 16K; the bins are log2, so the fractions are the same).
var Cases = []Case{
	{Name: "increasing", Distances: []uint64{64, 128, 256, 512, 1024}, Counts: []int{20, 20, 20, 20, 20}},
	{Name: "short-decreasing", Distances: []uint64{64, 128, 256, 512, 1024}, Counts: []int{200, 60, 15, 4, 2}},
	{Name: "long-decreasing", Distances: []uint64{64, 128, 256, 512, 1024}, Counts: []int{100, 30, 12, 5, 2}},
	{Name: "bell", Distances: []uint64{64, 128, 256, 512, 1024}, Counts: []int{50, 40, 40, 10, 3}},
	{Name: "multi-modal", Distances: []uint64{64, 128, 256, 512, 1024}, Counts: []int{100, 30, 24, 8, 7}},
}

// Generate emits the case's accesses for threads threads (tids 1 …
// threads), interleaved one access per thread in turn as threads running
// at once would; remote stores come from tid 1000+t (Remote) right after
// the owner's use, or with StoreLate after a random number of its next
// accesses, fewer than the distance.
func (c Case) Generate(threads int, seed uint64, emit func(Access)) Truth {
	var truth Truth
	type stream struct {
		phases []int // distance index per phase, shuffled
		phase  int
		walk   int // walks done in the current phase
		pos    uint64
		base   uint64
		inval  bool // the current walk's locations are stored to remotely
		done   uint64
		late   lateStores
	}
	rng := rand.New(rand.NewPCG(seed, seed+7))
	ss := make([]*stream, threads)
	for t := range ss {
		s := &stream{base: uint64(t+1) << 40}
		for range max(c.Outer, 1) {
			for i := range c.Distances {
				s.phases = append(s.phases, i)
			}
		}
		rng.Shuffle(len(s.phases), func(i, j int) { s.phases[i], s.phases[j] = s.phases[j], s.phases[i] })
		s.inval = rng.Float64() < c.Invalidate
		ss[t] = s
	}
	for live := threads; live > 0; {
		live = 0
		for t, s := range ss {
			if s.phase >= len(s.phases) {
				continue
			}
			live++
			i := s.phases[s.phase]
			d := c.Distances[i]
			addr := s.base + 8*s.pos
			tid := uint32(t + 1)
			emit(Access{TID: tid, Write: s.walk%2 == 1, Addr: addr, Size: 8})
			truth.Accesses++
			last := s.walk == c.Counts[i]
			switch {
			case last:
			case s.inval && c.StoreLate:
				s.late.add(s.done+rng.Uint64N(d), addr) // before the reuse, d accesses on
				truth.Invalidated++
			case s.inval:
				emit(Access{TID: 1000 + tid, Write: true, Addr: addr, Size: 8})
				truth.Invalidated++
			default:
				truth.Pairs[bits.Len64(d)-1]++
				truth.Kinds[kindOf(s.walk%2 == 1)][kindOf((s.walk+1)%2 == 1)]++
			}
			s.done++
			for _, a := range s.late.due(s.done) {
				emit(Access{TID: 1000 + tid, Write: true, Addr: a, Size: 8})
			}
			if s.pos++; s.pos == d {
				s.pos, s.walk = 0, s.walk+1
				s.inval = rng.Float64() < c.Invalidate
				if s.walk > c.Counts[i] {
					s.walk, s.phase = 0, s.phase+1
					s.base += 8 * d // fresh locations for the next phase
				}
			}
		}
	}
	return truth
}

// lateStores are remote stores waiting for their owner's access count:
// (due, addr) kept in order of due.
type lateStores []lateStore

type lateStore struct{ at, addr uint64 }

// add queues a store to addr at count at, after those due as soon.
func (l *lateStores) add(at, addr uint64) {
	i, _ := slices.BinarySearchFunc(*l, at+1, func(e lateStore, t uint64) int { return cmp.Compare(e.at, t) })
	*l = slices.Insert(*l, i, lateStore{at, addr})
}

// due removes and returns the stores due by count done, in order.
func (l *lateStores) due(done uint64) []uint64 {
	var out []uint64
	for len(*l) > 0 && (*l)[0].at <= done {
		out = append(out, (*l)[0].addr)
		*l = (*l)[1:]
	}
	return out
}

// Truth is what a generated trace holds: its reuse pairs by distance bin
// (invalidated ones left out) and by the use's and the reuse's kinds (walks
// alternate reads and writes: WAR and RAW), its invalidated pairs, and the
// profiled threads' accesses.
type Truth struct {
	Pairs                 [Bins]uint64
	Kinds                 [3][3]uint64
	Invalidated, Accesses uint64
}

func kindOf(write bool) Kind {
	if write {
		return Write
	}
	return Read
}

// Fractions are the pairs' bins as fractions, up to the last bin used.
func (t Truth) Fractions() []float64 {
	var total float64
	n := 0
	for k, c := range t.Pairs {
		total += float64(c)
		if c > 0 {
			n = k + 1
		}
	}
	out := make([]float64, n)
	for k := range out {
		out[k] = float64(t.Pairs[k]) / total
	}
	return out
}

// Accuracy is the thesis' S = 1 − Σ|Bᵢ − B̂ᵢ|/2 of measured fractions
// against expected ones. Measured fractions may sum to less than 1 (a
// share not resolved into bins): the missing mass counts as wrong, so
// leaving mass unresolved never raises S.
func Accuracy(expected, measured []float64) float64 {
	var diff, sum float64
	for k := range max(len(expected), len(measured)) {
		var e, m float64
		if k < len(expected) {
			e = expected[k]
		}
		if k < len(measured) {
			m = measured[k]
		}
		sum += m
		diff += math.Abs(e - m)
	}
	if sum == 0 {
		return 0
	}
	return 1 - (diff+max(1-sum, 0))/2
}

// Normalized are counts as fractions of their sum.
func Normalized[T uint64 | float64](counts []T) []float64 {
	var total float64
	for _, c := range counts {
		total += float64(c)
	}
	out := make([]float64, len(counts))
	for k, c := range counts {
		if total > 0 {
			out[k] = float64(c) / total
		}
	}
	return out
}

// Scaled is the case with its distances multiplied by f (its name says
// so): the long distances of the matrix.
func (c Case) Scaled(f uint64) Case {
	c.Distances = append([]uint64(nil), c.Distances...)
	for i := range c.Distances {
		c.Distances[i] *= f
	}
	c.Name = fmt.Sprintf("%s×%d", c.Name, f)
	return c
}

// OuterFor is the number of rounds that makes the case's trace at least n
// accesses long with threads threads.
func (c Case) OuterFor(threads int, n uint64) int {
	var per uint64
	for i, d := range c.Distances {
		per += d * uint64(c.Counts[i]+1)
	}
	per *= uint64(threads)
	return int((n + per - 1) / per)
}

// Remote says whether a thread of a generated trace is one of the remote
// writers (not part of the profiled workload).
func Remote(tid uint32) bool { return tid >= 1000 }
