// Package validate scores events against loops whose counts are known in
// advance, as CAT does (Danalis et al., §3.4): the least-squares slope β of
// an event's count over a geometric sweep of loop sizes, its r², and the
// goodness exp(−2(β·r² − β_e)²) against the expected slope β_e, which is
// near 1 only when the slope is right and the counts lie on a line; the
// seven branch loops' slopes together give an event's category. It is
// pure: kernel/selftest runs the loops and counts.
package validate

import (
	"errors"
	"fmt"
	"math"
)

// Fit is a least-squares line through (size, count) points.
type Fit struct {
	Slope, Intercept, R2 float64
}

// LeastSquares fits counts against sizes.
func LeastSquares(sizes, counts []float64) (Fit, error) {
	if len(sizes) != len(counts) {
		return Fit{}, fmt.Errorf("%d sizes but %d counts", len(sizes), len(counts))
	}
	n := float64(len(sizes))
	if n < 2 {
		return Fit{}, errors.New("a slope needs two sizes at least")
	}
	var mx, my float64
	for i := range sizes {
		mx += sizes[i]
		my += counts[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy, syy float64
	for i := range sizes {
		dx, dy := sizes[i]-mx, counts[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return Fit{}, errors.New("the sizes are all the same")
	}
	f := Fit{Slope: sxy / sxx}
	f.Intercept = my - f.Slope*mx
	switch {
	case syy == 0:
		f.R2 = 1 // a constant count lies exactly on its (flat) line
	default:
		f.R2 = sxy * sxy / (sxx * syy)
	}
	return f, nil
}

// Goodness is CAT's Eq. 1.
func Goodness(f Fit, expected float64) float64 {
	d := f.Slope*f.R2 - expected
	return math.Exp(-2 * d * d)
}

// PassGoodness is the goodness a measured slope needs: |β·r² − β_e| ≤ 0.23,
// which tells 1.5 from 2 (CAT's categories differ by 0.5 at least).
const PassGoodness = 0.9

// Verdict is a row's outcome.
type Verdict string

const (
	Pass          Verdict = "pass"
	Fail          Verdict = "fail"
	NotMeasurable Verdict = "not_measurable"
)

// Result is one (event, loop) row of `pmu_exporter validate`.
type Result struct {
	Event string `json:"event"`
	// Loop is the validation loop that judged it. The JSON key, like the
	// series' label, keeps CAT's word "kernel": files and dashboards
	// already read it.
	Loop          string  `json:"kernel"`
	ExpectedSlope float64 `json:"expected_slope"`
	Slope         float64 `json:"slope"`
	R2            float64 `json:"r2"`
	Goodness      float64 `json:"goodness"`
	Verdict       Verdict `json:"verdict"`
	Reason        string  `json:"reason,omitempty"`
}

// Judge scores an event's counts over a loop's sizes against the
// expected slope (counts per unit of size).
func Judge(event, loop string, expected float64, sizes, counts []float64) Result {
	r := Result{Event: event, Loop: loop, ExpectedSlope: expected}
	f, err := LeastSquares(sizes, counts)
	if err != nil {
		r.Verdict, r.Reason = NotMeasurable, err.Error()
		return r
	}
	r.Slope, r.R2, r.Goodness = round(f.Slope), round(f.R2), round(Goodness(f, expected))
	r.Verdict = Pass
	if Goodness(f, expected) < PassGoodness {
		r.Verdict = Fail
		r.Reason = fmt.Sprintf("%.4g per unit (r² %.4f), want %.4g", f.Slope, f.R2, expected)
	}
	return r
}

// JudgeLinear scores an event whose slope is not known in advance (cycles:
// it depends on the clock and the core) by its linearity alone: r² ≥ 0.99
// and a positive slope.
func JudgeLinear(event, loop string, sizes, counts []float64) Result {
	r := Result{Event: event, Loop: loop}
	f, err := LeastSquares(sizes, counts)
	if err != nil {
		r.Verdict, r.Reason = NotMeasurable, err.Error()
		return r
	}
	r.ExpectedSlope, r.Slope, r.R2, r.Goodness = round(f.Slope), round(f.Slope), round(f.R2), round(f.R2)
	r.Verdict = Pass
	if f.R2 < 0.99 || f.Slope <= 0 {
		r.Verdict = Fail
		r.Reason = fmt.Sprintf("not linear in the loop's size: slope %.4g, r² %.4f (want r² ≥ 0.99)", f.Slope, f.R2)
	}
	return r
}

// Unmeasurable is a row for an event that could not be counted.
func Unmeasurable(event, loop string, expected float64, why string) Result {
	return Result{Event: event, Loop: loop, ExpectedSlope: expected, Verdict: NotMeasurable, Reason: why}
}

func round(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*1e4) / 1e4
}

// JudgeStep scores a cache miss event over a pointer chase (CAT §4): per
// chase step it should be about 0 while the buffer fits the cache
// (capacity bytes; sizes at most half of it) and about 1 once it is well
// over it (at least twice); the slope reported is the plateau above.
func JudgeStep(event, loop string, capacity float64, sizes, perStep []float64) Result {
	r := Result{Event: event, Loop: loop, ExpectedSlope: 1}
	var low, high []float64
	for i, s := range sizes {
		switch {
		case s <= capacity/2:
			low = append(low, perStep[i])
		case s >= 2*capacity:
			high = append(high, perStep[i])
		}
	}
	if len(low) == 0 || len(high) == 0 {
		r.Verdict, r.Reason = NotMeasurable, fmt.Sprintf("the sweep does not reach both sides of the cache (%.0f bytes)", capacity)
		return r
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	lo, hi := mean(low), mean(high)
	r.Slope, r.R2 = round(hi), 0
	r.Goodness = round(math.Exp(-2 * ((hi-1)*(hi-1) + lo*lo)))
	r.Verdict = Pass
	if lo > 0.2 || hi < 0.5 {
		r.Verdict = Fail
		r.Reason = fmt.Sprintf("%.3f misses a step while the buffer fits (want ≈ 0), %.3f once it is twice the cache (want ≈ 1)", lo, hi)
	}
	return r
}
