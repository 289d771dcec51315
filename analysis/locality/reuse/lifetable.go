package reuse

import "math"

// Outcome is how a slot's watch ended: a column of the life table.
type Outcome uint8

const (
	// Reused: the owner (or, in Shared mode, its domain) touched the bytes.
	Reused Outcome = iota
	// Invalidated: another thread (another domain) stored to them first.
	Invalidated
	// Ended: the run ended with the slot still armed (the trace's end, in
	// the harness): the sampled access was not reused within the run.
	Ended
	// Censored: a later sample took the slot first. All that is known is
	// that the watch lasted this long without an outcome.
	Censored
	outcomes
)

// LifeTable counts the slots' watches by outcome and by age at their end
// (fine bins of the distance clock), and weighs them for Estimate: a
// right-censored competing-risks sample of the sampled accesses.
//
// A watch weighs the inverse of its chance to be there at each age: that
// its sample took a slot, times that the slot survived every later visit
// so far (as Horvitz–Thompson's weight). Both depend on the run around it,
// not only on its age: while long watches fill the slots fewer samples arm
// and the slots are visited more, so the watches of a phase of long
// distances are censored sooner than a phase of short ones, and an
// unweighted risk set holds too many short ones. Weighed, the watches at
// risk at an age stand for all sampled accesses not yet reused by then;
// the hazard at that age is the weight of those ending there over it
// (inverse-probability-of-censoring weighted Aalen–Johansen). It is
// additive: trackers' tables merge by summing.
type LifeTable struct {
	// Counts are the watches by outcome and age at their end.
	Counts [outcomes][Bins * SubBins]uint64
	// Events are the weights of the watches ending in each bin by outcome;
	// Risk the weights at risk in it, and RiskSquares their squares (the
	// weights' spread shrinks the sample's effective size: the intervals).
	Events            [Censored][Bins * SubBins]float64
	Risk, RiskSquares [Bins * SubBins]float64
	// Oldest is the greatest age any watch reached.
	Oldest uint64
}

// atRisk adds a watch weighing w at risk over fine bins [from, to).
func (l *LifeTable) atRisk(from, to int, w float64) {
	for j := from; j < to; j++ {
		l.Risk[j] += w
		l.RiskSquares[j] += w * w
	}
}

// end records a watch that ended with o at age, weighing w then, at risk
// from fine bin from on (the bins before were added as it aged). A
// censored watch is at risk for half its last bin (actuarial).
func (l *LifeTable) end(o Outcome, age uint64, from int, w float64) {
	j := FineBin(max(age, 1))
	l.atRisk(from, j, w)
	l.Counts[o][j]++
	l.Oldest = max(l.Oldest, age)
	if o == Censored {
		w /= 2
	} else {
		l.Events[o][j] += w
	}
	l.Risk[j] += w
	l.RiskSquares[j] += w * w
}

// Merge adds o's watches.
func (l *LifeTable) Merge(o *LifeTable) {
	for j := range l.Risk {
		for c := range l.Counts {
			l.Counts[c][j] += o.Counts[c][j]
		}
		for c := range l.Events {
			l.Events[c][j] += o.Events[c][j]
		}
		l.Risk[j] += o.Risk[j]
		l.RiskSquares[j] += o.RiskSquares[j]
	}
	l.Oldest = max(l.Oldest, o.Oldest)
}

// empty says whether no watch ever entered the table.
func (l *LifeTable) empty() bool {
	for _, r := range l.Risk {
		if r > 0 {
			return false
		}
	}
	return true
}

// Watches is how many watches ended with outcome o.
func (l *LifeTable) Watches(o Outcome) uint64 {
	var n uint64
	for _, c := range l.Counts[o] {
		n += c
	}
	return n
}

// Share is an estimated share of the sampled accesses with a 95% interval
// (Low, High), and the watches it rests on.
type Share struct {
	Share, Low, High float64
	Observed         uint64
}

// Estimate is what the life table says of all sampled accesses: the share
// reused at a distance in each log2 bin, invalidated, not reused before
// the run ended, and the rest, which had no outcome by Horizon (the oldest
// age any watch reached). That rest is Unreused where FollowUp watches
// were followed over an octave past the last reuse or invalidation
// without one (a cure model's sufficient follow-up: the hazard had fallen
// to nothing, so these are taken as accesses not reused), and otherwise
// NotResolved: a reuse further away than any watch lasted, or none. The
// shares sum to 1.
type Estimate struct {
	Watches     uint64
	Bins        [Bins]Share
	Invalidated Share
	Ended       Share
	Unreused    float64
	NotResolved float64
	Horizon     uint64
	// Fine is the reused share by fine bin (FineBin), for the footprint.
	Fine [Bins * SubBins]float64
}

// Reused is the reused share (resolved) over all bins.
func (e *Estimate) Reused() float64 {
	var s float64
	for _, b := range e.Bins {
		s += b.Share
	}
	return s
}

// Fractions are the reuse bins as fractions of all reuses, the not
// resolved ones included (they are reuses as far as anyone can tell), up
// to the last bin used; and the not resolved fraction.
func (e *Estimate) Fractions() (bins []float64, notResolved float64) {
	total := e.Reused() + e.NotResolved
	n := 0
	for k, b := range e.Bins {
		if b.Share > 0 {
			n = k + 1
		}
	}
	bins = make([]float64, n)
	if total == 0 {
		return bins, 0
	}
	for k := range bins {
		bins[k] = e.Bins[k].Share / total
	}
	return bins, e.NotResolved / total
}

// Estimate is the Aalen–Johansen estimate of the outcomes' cumulative
// incidences, on the life table's fine bins (actuarial: a watch censored
// within a bin is at risk for half of it). At each age the hazard of an
// outcome is the watches that ended with it over those still at risk, so
// a censored watch counts for as long as it lasted, and no weight depends
// on one slot's luck. Intervals are Wilson's 95% score intervals on the
// effective number of watches that the delta method's variance
// (Greenwood's, for competing risks) gives: a bin with no observation has
// none.
func (l *LifeTable) Estimate() Estimate { return l.estimate(nil) }

// Pooled is Estimate over the global slots' table and the own slots'
// (Options.Own). The own slots' watches see the owner's next touch and
// not another thread's store, so they join the hazards of a reuse and of
// the run's end, and the invalidations' hazard is the global slots'
// alone. That assumes what competing risks cannot test: that when another
// thread stores to the bytes does not depend on when the owner touches
// them next (docs/sampling.md). Each table's hazard counts by its
// effective number of watches at risk (inverse variance), so that a few
// heavily weighted global watches do not weigh as much as many own ones.
func Pooled(global, own *LifeTable) Estimate { return global.estimate(own) }

// estimate is Estimate, with the own slots' table where there is one.
func (l *LifeTable) estimate(own *LifeTable) Estimate {
	var e Estimate
	all := l
	if own != nil {
		merged := *l
		merged.Merge(own)
		all = &merged
	}
	last := -1
	for j := range all.Risk {
		for c := range all.Counts {
			if all.Counts[c][j] > 0 {
				last = j
				e.Watches += all.Counts[c][j]
			}
		}
	}
	e.Horizon = all.Oldest
	if last < 0 {
		e.NotResolved = 1
		return e
	}
	var t table
	t.n = last + 1
	tail, rate := l.invalidationTail(t.n)
	surv := 1.0
	for j := range t.n {
		t.surv[j] = surv
		t.hazards(l, own, j)
		if j >= tail {
			t.hazard[Invalidated][j] = min(rate*fineWidth(j), 1)
		}
		surv *= max(1-(t.hazard[Reused][j]+t.hazard[Invalidated][j]+t.hazard[Ended][j]), 0)
	}
	l = all
	if l.followedUp(t.n) {
		e.Unreused = surv
	} else {
		e.NotResolved = surv
	}
	for j := range t.n {
		e.Fine[j] = t.surv[j] * t.hazard[Reused][j]
	}
	for k := range Bins {
		lo, hi := k*SubBins, min((k+1)*SubBins, t.n)
		if lo >= t.n {
			break
		}
		e.Bins[k] = t.share(l, Reused, lo, hi)
	}
	e.Invalidated = t.share(l, Invalidated, 0, t.n)
	if own != nil {
		e.Invalidated.High = min(e.Invalidated.High+t.unfollowed(surv), 1)
	}
	e.Ended = t.share(l, Ended, 0, t.n)
	return e
}

// FollowUp is how many watches must outlast the last outcome's age twice
// over for the survivors to count as not reused: with none of them reused
// in that octave, its hazard is below 26% (95% confidence, 3/10). A
// stricter 30 left RIBench's never reused walks not resolved in most runs
// of the thesis' distances (mean S 0.936 against 0.950, docs/sampling.md).
const FollowUp = 10

// followedUp says whether FollowUp watches lasted beyond twice the age of
// the last reuse or invalidation (fine bins [0, n)).
func (l *LifeTable) followedUp(n int) bool {
	last := -1
	for j := range n {
		if l.Counts[Reused][j]+l.Counts[Invalidated][j] > 0 {
			last = j
		}
	}
	if last < 0 {
		return false
	}
	beyond := FineBin(uint64(2 * fineEdge(last+1)))
	var lasted uint64
	for j := beyond; j < n; j++ {
		for c := range l.Counts {
			lasted += l.Counts[c][j]
		}
	}
	return lasted >= FollowUp
}

// table is the life table's estimate at each fine bin: the survival at its
// start, the effective number of watches at risk in it (sizeInv: of those
// that see an invalidation), and each outcome's hazard.
type table struct {
	n             int
	surv          [Bins * SubBins]float64
	size, sizeInv [Bins * SubBins]float64
	hazard        [Censored][Bins * SubBins]float64
}

// hazards sets fine bin j's hazards from the global table g and the own
// one (nil: none): each table's weights scaled to sum to its effective
// (Kish) size, so that the pooled hazard is the two tables' hazards by
// inverse variance, and the effective size of the pool their sum.
func (t *table) hazards(g, own *LifeTable, j int) {
	var events [Censored]float64
	for _, l := range [2]*LifeTable{g, own} {
		if l == nil || l.Risk[j] <= 0 {
			continue
		}
		scale := l.Risk[j] / l.RiskSquares[j] // weights × scale sum to the effective size
		size := l.Risk[j] * scale
		t.size[j] += size
		for c := Reused; c < Censored; c++ {
			if c != Invalidated {
				events[c] += l.Events[c][j] * scale
			}
		}
		if l == g {
			t.sizeInv[j] = size
			t.hazard[Invalidated][j] = min(l.Events[Invalidated][j]/l.Risk[j], 1)
		}
	}
	if t.size[j] > 0 {
		t.hazard[Reused][j] = min(events[Reused]/t.size[j], 1)
		t.hazard[Ended][j] = min(events[Ended]/t.size[j], 1)
	}
}

// InvalidationRisk is the fewest global watches at risk (effective, Kish)
// at an age for its invalidation hazard to count as followed there.
const InvalidationRisk = 10

// invalidationTail is where the global watches thin out, and the
// invalidations' rate per unit of age from there on (fine bins [0, n)):
// the first fine bin at an age of 16 or more with fewer than
// InvalidationRisk effective watches at risk, and the invalidations' weight
// over the watches' weighed exposure in all bins from it. One rate for the
// whole tail, rather than one a bin: there a bin's hazard rests on two or
// three watches, and one invalidation of a heavy one made it 0.8 and took
// the mass of every later reuse bin with it (docs/sampling.md). The tail
// is n where no bin thins out (below 16 the bins are single ages).
func (l *LifeTable) invalidationTail(n int) (tail int, rate float64) {
	tail = n
	for j := 4 * SubBins; j < n; j++ {
		if l.RiskSquares[j] == 0 || l.Risk[j]*l.Risk[j]/l.RiskSquares[j] < InvalidationRisk {
			tail = j
			break
		}
	}
	var events, exposure float64
	for j := tail; j < n; j++ {
		events += l.Events[Invalidated][j]
		exposure += l.Risk[j] * fineWidth(j)
	}
	if exposure > 0 {
		rate = events / exposure
	}
	return tail, rate
}

// fineWidth is how many ages fine bin j spans (from 16 on, where every
// bin of an octave spans alike).
func fineWidth(j int) float64 { return fineEdge(j+1) - fineEdge(j) }

// unfollowed is the share of the sampled accesses whose outcome came at an
// age where fewer than InvalidationRisk global watches were at risk, and
// the survivors past the oldest watch (end) where the last age was so: the
// own slots saw those touches and ends, and cannot tell whether another
// thread stored first, so any of them may have been an invalidation. The
// invalidated share's upper bound takes it in: without it, where another
// thread stores late in the reuse interval and the one global slot's
// watches do not live that long, the 95% interval held the truth in 30 to
// 80% of runs (docs/sampling.md).
func (t *table) unfollowed(end float64) float64 {
	var u float64
	for j := range t.n {
		if t.sizeInv[j] < InvalidationRisk {
			u += t.surv[j] * (t.hazard[Reused][j] + t.hazard[Ended][j])
		}
	}
	if t.n > 0 && t.sizeInv[t.n-1] < InvalidationRisk {
		u += end
	}
	return u
}

// share is outcome c's cumulative incidence over fine bins [lo, hi), and
// its variance by the delta method: the incidence is a function of the
// hazards, each bin's multinomial given those at risk and independent of
// the others', so the variance sums each bin's gradient through its
// covariance. A bin's hazards reach the incidence of the bins after it
// through the survival, hence the backward sweep (O(bins)).
func (t *table) share(l *LifeTable, c Outcome, lo, hi int) Share {
	var s Share
	var after, variance float64 // after: the incidence in [lo, hi) from bins beyond i
	for i := hi - 1; i >= 0; i-- {
		in := i >= lo
		lc := t.hazard[c][i]
		all := t.hazard[Reused][i] + t.hazard[Invalidated][i] + t.hazard[Ended][i]
		other := all - lc // the other outcomes' hazard
		var through float64
		if all < 1 {
			through = after / (1 - all)
		}
		gc, go_ := -through, -through
		if in {
			gc += t.surv[i]
		}
		r := t.size[i]
		if c == Invalidated {
			r = t.sizeInv[i]
		}
		if r > 0 {
			variance += (gc*gc*lc*(1-lc) + go_*go_*other*(1-other) - 2*gc*go_*lc*other) / r
		}
		if in {
			after += t.surv[i] * lc
			s.Observed += l.Counts[c][i]
		}
	}
	s.Share = after
	if s.Observed > 0 {
		s.Low, s.High = wilson(s.Share, t.effective(s.Share, variance, lo))
	}
	return s
}

// effective is the number of unweighted, uncensored watches that would
// give share p the variance it has, at most the effective number of all
// watches. At a share of 0 or 1 (to rounding) the delta method gives no
// variance; the effective number at risk entering the bins stands in for
// it (all of them ended there).
func (t *table) effective(p, variance float64, lo int) float64 {
	const round = 1e-9
	if variance > 0 && p > round && p < 1-round {
		return min(p*(1-p)/variance, t.size[0])
	}
	return t.size[lo]
}

// wilson is the 95% Wilson score interval of share p from n watches: the
// normal one's width where p is well inside (0, 1), but never of zero
// width at 0 or 1, where a bin of n out of n watches is not certain.
func wilson(p, n float64) (low, high float64) {
	if n <= 0 {
		return 0, 1
	}
	const z = 1.96
	z2n := z * z / n
	center := (p + z2n/2) / (1 + z2n)
	half := z / (1 + z2n) * math.Sqrt(p*(1-p)/n+z2n/(4*n))
	return max(center-half, 0), min(center+half, 1)
}
