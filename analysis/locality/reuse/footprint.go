package reuse

import (
	"math"
	"math/bits"
	"sort"
)

// Footprint converts a reuse-time histogram into LRU stack distances and
// miss ratios with the higher-order theory of locality (Xiang, Ding et
// al., "All-window profiling and composable models of cache sharing",
// PPoPP 2011; "HOTL", ASPLOS 2013): the average number of distinct data in
// a window of w accesses is fp(w) = ∫₀ʷ P(rt > t) dt, where rt is an
// access's reuse time (∞ when never reused); an access reused after t
// accesses has an LRU stack distance of about fp(t), so an LRU cache of c
// data misses a share P(rt > fp⁻¹(c)) of the accesses.
//
// The histogram is ReuseTracker's fine one (Tracker.Fine: SubBins linear
// sub-bins per power of two, reuses taken as uniform within a sub-bin; a
// whole octave per bin smears a reuse at 2ᵏ over [2ᵏ, 2ᵏ⁺¹) and misplaces
// stack distances by up to half), and the number of accesses it describes;
// accesses not reused (invalidated, or not seen again) count as never
// reused. Time must be counted in accesses (the loads + stores clock, or a
// trace's): a clock in nanoseconds gives fp in nanoseconds, not data, and
// has no stack distance.
type Footprint struct {
	// at each bin edge (edge[0] = 1): the survival S(t) = P(rt > t) and fp(t).
	edge, surv, fp []float64
}

// SubBins is how many linear sub-bins the fine histogram has per power of
// two.
const SubBins = 16

// FineBin is the fine bin of a distance d ≥ 1.
func FineBin(d uint64) int {
	k := bits.Len64(d) - 1
	if k < 4 { // below 16 there are fewer than SubBins integers per octave
		return k*SubBins + int(d-1<<k)*SubBins>>k
	}
	return k*SubBins + int((d-1<<k)>>(k-4))
}

// fineEdge is the lower edge of fine bin j.
func fineEdge(j int) float64 {
	k, s := j/SubBins, j%SubBins
	return math.Ldexp(1+float64(s)/SubBins, k)
}

// NewFootprint is the footprint of reuses[j] accesses reused at a distance
// in fine bin j, out of accesses (≥ their sum).
func NewFootprint(reuses []float64, accesses float64) Footprint {
	var total float64
	for _, m := range reuses {
		total += m
	}
	if accesses < total {
		accesses = total
	}
	n := len(reuses)
	f := Footprint{edge: make([]float64, n+1), surv: make([]float64, n+1), fp: make([]float64, n+1)}
	f.edge[0], f.surv[0], f.fp[0] = 1, 1, 1 // no access is reused within less than one access
	for j, m := range reuses {
		f.edge[j+1] = fineEdge(j + 1)
		f.surv[j+1] = f.surv[j]
		if accesses > 0 {
			f.surv[j+1] = max(f.surv[j]-m/accesses, 0)
		}
		f.fp[j+1] = f.fp[j] + (f.edge[j+1]-f.edge[j])*(f.surv[j]+f.surv[j+1])/2 // trapezoid
	}
	return f
}

// segment is the bin holding t (len(edge)-1: beyond the last).
func (f Footprint) segment(t float64) int {
	return sort.SearchFloat64s(f.edge, math.Nextafter(t, math.Inf(1))) - 1
}

// Survival is P(rt > t).
func (f Footprint) Survival(t float64) float64 {
	if t < 1 {
		return 1
	}
	j := f.segment(t)
	if j >= len(f.edge)-1 {
		return f.surv[len(f.surv)-1]
	}
	a, b := f.edge[j], f.edge[j+1]
	return f.surv[j] + (f.surv[j+1]-f.surv[j])*(t-a)/(b-a)
}

// At is fp(w): the distinct data in a window of w accesses.
func (f Footprint) At(w float64) float64 {
	if w <= 1 {
		return max(w, 0)
	}
	j := f.segment(w)
	last := len(f.edge) - 1
	if j >= last {
		return f.fp[last] + f.surv[last]*(w-f.edge[last])
	}
	a, b := f.edge[j], f.edge[j+1]
	x := w - a
	return f.fp[j] + f.surv[j]*x + (f.surv[j+1]-f.surv[j])*x*x/(2*(b-a))
}

// Window is fp⁻¹(c): the window whose footprint is c data (+Inf where no
// window has that many).
func (f Footprint) Window(c float64) float64 {
	if c <= 1 {
		return max(c, 0)
	}
	last := len(f.edge) - 1
	j := sort.SearchFloat64s(f.fp, c) - 1 // fp[j] < c ≤ fp[j+1]
	if j < last {
		// fp(a+x) = fp(a) + s0·x + (s1−s0)·x²/(2(b−a)) = c, x in [0, b−a].
		a, b := f.edge[j], f.edge[j+1]
		s0, s1 := f.surv[j], f.surv[j+1]
		d := c - f.fp[j]
		q := (s1 - s0) / (2 * (b - a))
		if math.Abs(q) < 1e-15 {
			return a + d/s0
		}
		return a + (-s0+math.Sqrt(math.Max(s0*s0+4*q*d, 0)))/(2*q)
	}
	if f.surv[last] <= 0 {
		return math.Inf(1)
	}
	return f.edge[last] + (c-f.fp[last])/f.surv[last]
}

// MissRatio is the share of accesses an LRU cache of c data misses.
func (f Footprint) MissRatio(c float64) float64 {
	w := f.Window(c)
	if math.IsInf(w, 1) {
		return f.surv[len(f.surv)-1]
	}
	return f.Survival(w)
}

// StackDistances spreads reuses (per fine bin, as given to NewFootprint)
// over LRU stack distances: out[i] is the reuses whose stack distance
// fp(t) is at most bounds[i] (ascending), cumulative like a histogram's
// buckets.
func (f Footprint) StackDistances(reuses []float64, bounds []float64) []float64 {
	out := make([]float64, len(bounds))
	for i, c := range bounds {
		w := f.Window(c) // fp(t) ≤ c ⇔ t ≤ w
		for j, m := range reuses {
			a, b := fineEdge(j), fineEdge(j+1)
			out[i] += m * math.Min(math.Max((w-a)/(b-a), 0), 1)
		}
	}
	return out
}
