package reuse

import (
	"math"
	"testing"
)

// Without censoring and with equal weights the estimate is the plain
// shares, and each interval the binomial one, p ± 1.96·√(p(1−p)/n): 10
// watches, 5 reused at 4, 3 at 100, 2 invalidated at 2.
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
		half := 1.96 * math.Sqrt(c.p*(1-c.p)/10)
		if math.Abs(c.got.Share-c.p) > 1e-12 || math.Abs(c.got.Low-max(c.p-half, 0)) > 1e-9 || math.Abs(c.got.High-(c.p+half)) > 1e-9 {
			t.Errorf("%s: %+v, want %.3f ± %.4f", c.name, c.got, c.p, half)
		}
	}
	if e.NotResolved != 0 || e.Watches != 10 || e.Horizon != 100 {
		t.Errorf("%+v", e)
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
