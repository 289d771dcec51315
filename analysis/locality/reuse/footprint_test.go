package reuse

import (
	"math"
	"math/rand/v2"
	"testing"
)

// lruMisses is the independent oracle: an exact LRU stack simulation
// (stack distance = distinct data since the previous access, with a
// Fenwick tree over last-access times), giving the miss ratio of each
// cache size in data.
func lruMisses(trace []uint64, sizes []int) []float64 {
	n := len(trace)
	tree := make([]int, n+1)
	add := func(i, v int) {
		for i++; i <= n; i += i & -i {
			tree[i] += v
		}
	}
	sum := func(i int) int { // over [0, i]
		s := 0
		for i++; i > 0; i -= i & -i {
			s += tree[i]
		}
		return s
	}
	last := map[uint64]int{}
	misses := make([]int, len(sizes))
	for t, x := range trace {
		p, seen := last[x]
		dist := math.MaxInt
		if seen {
			dist = sum(t-1) - sum(p) + 1 // distinct data after p, and x itself
			add(p, -1)
		}
		add(t, 1)
		last[x] = t
		for i, c := range sizes {
			if dist > c {
				misses[i]++
			}
		}
	}
	out := make([]float64, len(sizes))
	for i := range out {
		out[i] = float64(misses[i]) / float64(n)
	}
	return out
}

// reuseBins is the exact reuse-time histogram of a trace, log2 bins.
func reuseBins(trace []uint64) []float64 {
	last := map[uint64]int{}
	out := make([]float64, 40*SubBins)
	for t, x := range trace {
		if p, ok := last[x]; ok {
			out[FineBin(uint64(t-p))]++
		}
		last[x] = t
	}
	return out
}

func TestFootprintByHand(t *testing.T) {
	// A cyclic walk over 8 data: every reuse 8 accesses later, in the
	// fine bin [8, 8.5). fp(w) = w up to 8; S falls linearly from 1 at 8
	// to 0 at 8.5, so fp(8 + x) = 8 + x − x² there and fp(8.5) = 8.25.
	bins := make([]float64, 4*SubBins)
	bins[FineBin(8)] = 1000
	if FineBin(8) != 3*SubBins || FineBin(9) != 3*SubBins+2 || FineBin(1) != 0 || FineBin(3) != SubBins+SubBins/2 || FineBin(1<<20+1<<19) != 20*SubBins+SubBins/2 {
		t.Fatalf("fine bins: 8→%d 9→%d 1→%d 3→%d 1.5M→%d", FineBin(8), FineBin(9), FineBin(1), FineBin(3), FineBin(1<<20+1<<19))
	}
	f := NewFootprint(bins, 1000)
	for _, c := range []struct{ w, fp float64 }{{0.5, 0.5}, {4, 4}, {8, 8}, {8.25, 8.1875}, {8.5, 8.25}, {100, 8.25}} {
		if got := f.At(c.w); math.Abs(got-c.fp) > 1e-12 {
			t.Errorf("fp(%v) = %v, want %v", c.w, got, c.fp)
		}
	}
	if got := f.MissRatio(4); got != 1 {
		t.Errorf("miss ratio of 4 data = %v, want 1 (the walk is 8 long)", got)
	}
	if got := f.MissRatio(8.25); got != 0 {
		t.Errorf("miss ratio of 8.25 data = %v, want 0", got)
	}
	// fp(8+x) = 8.125 at x = (1 − √½)/2, where S = 1 − 2x = √½.
	if got := f.MissRatio(8.125); math.Abs(got-math.Sqrt(0.5)) > 1e-9 {
		t.Errorf("miss ratio of 8.125 data = %v, want √½", got)
	}
	// Never reused: fp grows one per access, every size misses.
	if got := NewFootprint(nil, 100).MissRatio(1e6); got != 1 {
		t.Errorf("miss ratio with no reuse = %v, want 1", got)
	}
	// Stack distances: none ≤ 4, all ≤ 8.25; at 8.125 the share of the
	// bin [8, 8.5) below fp⁻¹(8.125) = 8 + x.
	sd := f.StackDistances(bins, []float64{4, 8.125, 8.25, 64})
	want := []float64{0, 1000 * (1 - math.Sqrt(0.5)), 1000, 1000}
	for i := range sd {
		if math.Abs(sd[i]-want[i]) > 1e-6 {
			t.Errorf("stack distances ≤ bound %d: %v, want %v", i, sd[i], want[i])
		}
	}
}

// Uniformly random accesses to N data: an LRU cache of c data misses 1 −
// c/N of them (the reused datum's stack position is uniform), which the
// footprint reproduces from the reuse times alone; and it agrees with an
// exact LRU simulation of a mixture of a hot and a cold set too. (Not of
// a phased program such as RIBench's walks: the footprint averages over
// the whole run, where each phase has its own.)
func TestFootprintMissRatio(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const N = 4096
	trace := make([]uint64, 400_000)
	for i := range trace {
		trace[i] = rng.Uint64N(N)
	}
	sizes := []int{256, 1024, 2048, 3072, 4000}
	f := NewFootprint(reuseBins(trace), float64(len(trace)))
	lru := lruMisses(trace, sizes)
	for i, c := range sizes {
		analytic := 1 - float64(c)/N
		got := f.MissRatio(float64(c))
		if math.Abs(got-analytic) > 0.03 || math.Abs(lru[i]-analytic) > 0.03 {
			t.Errorf("uniform over %d, cache %d: footprint %.3f, LRU simulation %.3f, analytic %.3f", N, c, got, lru[i], analytic)
		}
	}

	// A stationary mixture: half the accesses to a hot set of 256 data,
	// half to a cold set of 8192.
	mixed := make([]uint64, 400_000)
	for i := range mixed {
		if rng.IntN(2) == 0 {
			mixed[i] = rng.Uint64N(256)
		} else {
			mixed[i] = 1<<20 + rng.Uint64N(8192)
		}
	}
	f = NewFootprint(reuseBins(mixed), float64(len(mixed)))
	sizes = []int{64, 256, 512, 2048, 6000}
	lru = lruMisses(mixed, sizes)
	for i, c := range sizes {
		if got := f.MissRatio(float64(c)); math.Abs(got-lru[i]) > 0.03 {
			t.Errorf("hot and cold mixture, cache %d: footprint %.3f, LRU simulation %.3f", c, got, lru[i])
		}
	}
}

// Through the harness: ReuseTracker's sampled, estimated histogram gives
// the same miss ratios as the exact simulation of the whole trace.
func TestSampledFootprint(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const N = 2048
	r := NewReplay(ReplayOptions{Period: 64, Options: Options{Seed: 1}})
	trace := make([]uint64, 1_000_000)
	for i := range trace {
		trace[i] = rng.Uint64N(N)
		r.Access(Access{TID: 1, Addr: 0x1000 + 64*trace[i], Size: 8})
	}
	r.Finish()
	e := r.Tracker.Estimate()
	f := NewFootprint(e.Fine[:], 1)
	sizes := []int{128, 512, 1024, 1536}
	lru := lruMisses(trace, sizes)
	for i, c := range sizes {
		if got := f.MissRatio(float64(c)); math.Abs(got-lru[i]) > 0.05 {
			t.Errorf("cache %d: sampled footprint %.3f, LRU simulation %.3f (%d samples, %d reuses)", c, got, lru[i], r.Tracker.Samples, r.Tracker.Reuses)
		}
	}
}
