package validate

import (
	"fmt"
	"math"
)

// Category is what a branch event counts (CAT §3.3).
type Category string

const (
	CE Category = "CE" // conditional branches executed (speculative ones too)
	CR Category = "CR" // conditional branches retired
	T  Category = "T"  // conditional branches taken
	D  Category = "D"  // direct unconditional branches
	M  Category = "M"  // mispredicted branches
	// All is every retired branch, conditional or not (CR + D): perf's
	// generic "branches", which CAT's categories do not name.
	All Category = "ALL"
)

// Signatures are the branch loops' counts per iteration by category
// (CAT Fig. 11, kernel/selftest/loops for the layout).
var Signatures = map[Category][7]float64{
	CE:  {2, 2, 2, 2, 2.5, 2, 1},
	CR:  {2, 2, 2, 2, 2, 2, 1},
	T:   {1.5, 1, 2, 1.5, 1.5, 1, 1},
	D:   {0, 0, 0, 0, 0, 1, 0},
	M:   {0, 0, 0, 0.5, 0.5, 0, 0},
	All: {2, 2, 2, 2, 2, 3, 1},
}

// categories in a fixed order, for reports and ties.
var categories = []Category{CE, CR, T, D, M, All}

// softLoop is the loop whose CE count depends on how far the core
// speculates past a mispredicted branch (loop 5's 2.5): a soft check.
const softLoop = 4

// Classify scores an event's fits on the seven branch loops against each
// category: the smallest goodness over the loops (CE's soft loop left
// out), and names the best. CE and CR differ only in loop 5: an event
// scoring both ways is CE if loop 5 is nearer 2.5 than 2.
func Classify(fits [7]Fit) (Category, map[Category]float64) {
	scores := map[Category]float64{}
	for _, c := range categories {
		s := 1.0
		for k, f := range fits {
			if c == CE && k == softLoop {
				continue
			}
			s = math.Min(s, Goodness(f, Signatures[c][k]))
		}
		scores[c] = s
	}
	best := categories[0]
	for _, c := range categories {
		if scores[c] > scores[best] {
			best = c
		}
	}
	if best == CE || best == CR {
		k5 := fits[softLoop].Slope * fits[softLoop].R2
		if math.Abs(k5-2.5) < math.Abs(k5-2) {
			best = CE
		} else {
			best = CR
		}
	}
	return best, scores
}

// JudgeBranches scores an event expected to be of category want over the
// seven branch loops: a row per loop against want's signature, and the
// event's verdict in the last row (loop "branch-signature"): pass when
// the best category is want with goodness ≥ PassGoodness (an event
// expected CE that looks CR passes: loop 5 is soft).
func JudgeBranches(event string, want Category, sizes []float64, counts [7][]float64) []Result {
	var fits [7]Fit
	var out []Result
	for k := range 7 {
		r := Judge(event, fmt.Sprintf("branch-%d", k+1), Signatures[want][k], sizes, counts[k])
		if r.Verdict == NotMeasurable {
			return append(out, r)
		}
		fits[k], _ = LeastSquares(sizes, counts[k])
		if want == CE && k == softLoop && r.Verdict == Fail {
			r.Verdict, r.Reason = Pass, r.Reason+" (soft: how far a core speculates past a mispredicted branch varies)"
		}
		out = append(out, r)
	}
	best, scores := Classify(fits)
	sig := Result{Event: event, Loop: "branch-signature", Goodness: round(scores[want]), Verdict: Pass}
	switch {
	case best == want || (want == CE && best == CR && scores[CE] >= PassGoodness):
	default:
		sig.Verdict = Fail
		sig.Reason = fmt.Sprintf("counts like category %s (goodness %.3f), not the expected %s (%.3f): slopes %s",
			best, scores[best], want, scores[want], slopes(fits))
	}
	if sig.Verdict == Pass && scores[want] < PassGoodness {
		sig.Verdict = Fail
		sig.Reason = fmt.Sprintf("closest to %s, but goodness %.3f < %.2f: slopes %s", want, scores[want], PassGoodness, slopes(fits))
	}
	return append(out, sig)
}

func slopes(fits [7]Fit) string {
	s := ""
	for k, f := range fits {
		if k > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.2f", f.Slope)
	}
	return s
}
