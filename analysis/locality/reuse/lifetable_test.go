package reuse

import (
	"math"
	"testing"
)

// Without censoring and with equal weights the estimate is the plain
// shares, and each interval the binomial one, Wilson's score interval
// (p + z²/2n ± z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n), z = 1.96: 10
// watches, 5 reused at 4, 3 at 100, 2 invalidated at 2; and 10 of 10
// reused in one bin is not certain: its interval is [n/(n+z²), 1].
func TestEstimateUncensoredIsBinomial(t *testing.T) {
	var l LifeTable
	for range 5 {
		l.end(Reused, 4, 0, 1)
	}
	for range 3 {
		l.end(Reused, 100, 0, 1)
	}
	for range 2 {
		l.end(Invalidated, 2, 0, 1)
	}
	e := l.Estimate()
	for _, c := range []struct {
		name string
		got  Share
		p    float64
	}{{"bin 2", e.Bins[2], 0.5}, {"bin 6", e.Bins[6], 0.3}, {"invalidated", e.Invalidated, 0.2}} {
		const n, z = 10.0, 1.96
		center := (c.p + z*z/(2*n)) / (1 + z*z/n)
		half := z * math.Sqrt(c.p*(1-c.p)/n+z*z/(4*n*n)) / (1 + z*z/n)
		if math.Abs(c.got.Share-c.p) > 1e-12 || math.Abs(c.got.Low-(center-half)) > 1e-9 || math.Abs(c.got.High-(center+half)) > 1e-9 {
			t.Errorf("%s: %+v, want %.3f in [%.4f, %.4f]", c.name, c.got, c.p, center-half, center+half)
		}
	}
	if e.NotResolved != 0 || e.Watches != 10 || e.Horizon != 100 {
		t.Errorf("%+v", e)
	}
	var all LifeTable
	for range 10 {
		all.end(Reused, 4, 0, 1)
	}
	b := all.Estimate().Bins[2]
	if low := 10 / (10 + 1.96*1.96); b.Share != 1 || math.Abs(b.Low-low) > 1e-9 || b.High != 1 {
		t.Errorf("10 of 10 reused: %+v, want 1 in [%.4f, 1]", b, low)
	}
}

// Kaplan–Meier by hand: 4 watches, one censored at 3 (half its bin at
// risk), one reused at 5, two at 40. At age 3 nothing ends; at 5 one of
// 3 at risk is reused: 1/3; the two left are reused at 40: 2/3. And the
// life table is additive: two halves merged estimate the same.
func TestEstimateCensoredByHand(t *testing.T) {
	var a, b LifeTable
	a.end(Censored, 3, 0, 1)
	a.end(Reused, 5, 0, 1)
	b.end(Reused, 40, 0, 1)
	b.end(Reused, 40, 0, 1)
	a.Merge(&b)
	e := a.Estimate()
	if math.Abs(e.Bins[2].Share-1.0/3) > 1e-12 || math.Abs(e.Bins[5].Share-2.0/3) > 1e-12 || e.NotResolved > 1e-12 {
		t.Errorf("bins %+v %+v, not resolved %g: want 1/3 and 2/3", e.Bins[2], e.Bins[5], e.NotResolved)
	}
	// A watch censored at 200, past every reuse: the rest is not resolved
	// (one watch is short of FollowUp's); with FollowUp of them, unreused.
	a.end(Censored, 200, 0, 1)
	if e := a.Estimate(); e.NotResolved == 0 || e.Unreused != 0 {
		t.Errorf("one watch past the last reuse: %+v", e)
	}
	for range FollowUp {
		a.end(Censored, 200, 0, 1)
	}
	if e := a.Estimate(); e.NotResolved != 0 || e.Unreused == 0 {
		t.Errorf("%d watches past twice the last reuse: not resolved %g, unreused %g", FollowUp+1, e.NotResolved, e.Unreused)
	}
}

// Where the global watches thin out, the invalidations' hazard is one rate
// per unit of age over the whole tail, by hand: 12 watches of weight 1, 10
// censored at 32 (fine bin 80, at risk for half of it: Kish size
// 7²/4.5 = 10.9, still followed), one invalidated and one reused at 48
// (bin 88). From bin 81 two are at risk (Kish 2 < InvalidationRisk): the
// tail. Its exposure is 2 watches × 8 bins × 2 ages = 32 with one
// invalidation, so each tail bin's hazard is 2/32 = 1/16, and bin 88's
// reuse hazard 1/2. Invalidated: 1 − (15/16)⁸; reused (bin 5):
// (15/16)⁷/2; the rest not resolved. A hazard per bin would have made
// bin 88's 1/2: invalidated 1/2.
func TestInvalidationTailByHand(t *testing.T) {
	var l LifeTable
	for range 10 {
		l.end(Censored, 32, 0, 1)
	}
	l.end(Invalidated, 48, 0, 1)
	l.end(Reused, 48, 0, 1)
	if tail, rate := l.invalidationTail(FineBin(48) + 1); tail != 81 || rate != 1.0/32 {
		t.Errorf("tail from bin %d at %g an age, want 81 at 1/32", tail, rate)
	}
	e := l.Estimate()
	inv, reused := 1-math.Pow(15.0/16, 8), math.Pow(15.0/16, 7)/2
	if math.Abs(e.Invalidated.Share-inv) > 1e-12 || math.Abs(e.Bins[5].Share-reused) > 1e-12 || math.Abs(e.NotResolved-(1-inv-reused)) > 1e-12 {
		t.Errorf("invalidated %.6f, reused %.6f, not resolved %.6f; want %.6f, %.6f, %.6f", e.Invalidated.Share, e.Bins[5].Share, e.NotResolved, inv, reused, 1-inv-reused)
	}
}

// Another thread storing anywhere in the reuse interval (StoreLate), which
// only the global slot sees: the invalidated share's 95% interval holds
// the trace's share, at the CLI's density and 4× it, with 1, 2 and 8
// threads, because its upper bound takes in what the global slot did not
// follow (TestAccuracyOnLongTraces holds the estimate itself).
func TestInvalidatedIntervalHoldsLateStores(t *testing.T) {
	for _, threads := range []int{1, 2, 8} {
		for _, period := range []uint64{1000, 250} {
			c := Cases[0].Scaled(16)
			c.Invalidate, c.StoreLate = 0.3, true
			c.Outer = c.OuterFor(threads, 2e6)
			r := NewReplay(ReplayOptions{Options: Options{Seed: 3, Own: DefaultOwn}, Period: period, Unsampled: Remote})
			truth := c.Generate(threads, 21, r.Access)
			r.Finish()
			inv := r.Tracker.Estimate().Invalidated
			want := float64(truth.Invalidated) / float64(truth.Accesses)
			t.Logf("%d threads, period %d: invalidated %.3f in [%.3f, %.3f], the trace's %.3f", threads, period, inv.Share, inv.Low, inv.High, want)
			if want < inv.Low || want > inv.High {
				t.Errorf("%d threads, period %d: the trace's invalidated share %.3f is outside [%.3f, %.3f]", threads, period, want, inv.Low, inv.High)
			}
		}
	}
}
