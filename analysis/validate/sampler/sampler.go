// Package sampler judges a sampler as package validate judges a counter:
// over loops whose events, instructions and data addresses are known
// (kernel/selftest/loops), each run gives what the sampler caught and what
// it should have, and the figures of Sasongko's thesis (chapter 4) follow:
// accuracy over intervals, its stability over runs, bias across the
// instructions that make the event, attribution to the triggering
// instruction, correctness of the data addresses, mode leak and loss. Each
// figure gets a verdict by a threshold that docs/trust.md justifies. It is
// pure: counts in, rows out.
package sampler

import (
	"fmt"
	"math"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
)

// Run is one run of a sampler over a loop, as measured.
type Run struct {
	Period uint64
	// Events are the events the loop made in the run (pages written, or ns
	// of CPU time for a clock), known from the loop, not from the sampler.
	Events float64
	// Samples are the sampler's samples of the loop; Lost and Throttled
	// what the kernel said it dropped (LOST records, THROTTLE records).
	Samples         int
	Lost, Throttled uint64
	// Attributed are the samples on the instruction (or, for a clock, the
	// loop function) that made their event.
	Attributed int
	// Addressed are the samples whose data address was checked, and
	// AddressRight those whose address is one the loop accessed.
	Addressed, AddressRight int
	// WrongMode are samples in kernel mode from a sampler of user mode only.
	WrongMode int
	// Shares are the samples by the instructions (or functions) that made
	// the events, each with its known share of the events (or of the time).
	Shares []Share
	// ModeOnly: a run over work in both modes (the Exec-Mode loop), whose
	// samples count for mode_leak and loss alone.
	ModeOnly bool
	// SubsetEvents, where not 0, are the loop's events of a subset of what
	// the sampler samples (the loads among IBS op's ops), known from the
	// loop, and SubsetSamples the samples of that subset.
	SubsetEvents  float64
	SubsetSamples int
}

// Share is one instruction's (or function's) samples and its known share.
type Share struct {
	Name     string
	Samples  int
	Expected float64 // its share of the events, 0 to 1
}

// Figures, by the thesis's names.
const (
	Accuracy = "accuracy" // captured ÷ expected samples
	// SubsetAccuracy and SubsetStability are accuracy and stability on a
	// subset of the sampled events (IBS op's loads).
	SubsetAccuracy  = "subset_accuracy"
	SubsetStability = "subset_stability"
	Stability       = "stability"   // standard error of the accuracy over runs
	Bias            = "bias"        // total variation distance of sample shares from event shares
	Attribution     = "attribution" // share of samples on the triggering instruction
	Address         = "address"     // share of checked data addresses that are right
	ModeLeak        = "mode_leak"   // share of samples in the mode the sampler excludes
	Loss            = "loss"        // share of records lost or throttled
)

// Thresholds are the bounds a sampler's figures must keep: Accuracy the
// largest relative error of the mean accuracy, Stability the largest
// standard error, Bias the largest distance beyond sampling noise,
// Attribution and Address the smallest shares, ModeLeak and Loss the
// largest shares.
type Thresholds struct {
	Accuracy, Stability, Bias, Attribution, Address, ModeLeak, Loss float64
}

// Row is one figure's verdict: of one period (accuracy, stability), or of
// every run (the others, Period 0).
type Row struct {
	Sampler string           `json:"sampler"`
	Figure  string           `json:"figure"`
	Period  uint64           `json:"period,omitempty"`
	Value   float64          `json:"value"`
	Bound   float64          `json:"bound"`
	Runs    int              `json:"runs"`
	Verdict validate.Verdict `json:"verdict"`
	Reason  string           `json:"reason,omitempty"`
}

// Judge gives the verdicts on one sampler's runs (every period's).
func Judge(name string, runs []Run, th Thresholds) []Row {
	var rows []Row
	periods := map[uint64][]Run{}
	for _, r := range runs {
		if !r.ModeOnly {
			periods[r.Period] = append(periods[r.Period], r)
		}
	}
	keys := make([]uint64, 0, len(periods))
	for p := range periods {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		rows = append(rows, accuracy(name, Accuracy, p, periods[p], th, func(r Run) (float64, int) { return r.Events, r.Samples })...)
		if slices.ContainsFunc(periods[p], func(r Run) bool { return r.SubsetEvents > 0 }) {
			rows = append(rows, accuracy(name, SubsetAccuracy, p, periods[p], th, func(r Run) (float64, int) { return r.SubsetEvents, r.SubsetSamples })...)
		}
		rows = append(rows, bias(name, p, periods[p], th.Bias))
	}
	var samples, attributed, addressed, right, wrongMode, all int
	var lost uint64
	for _, r := range runs {
		all += r.Samples
		wrongMode += r.WrongMode
		lost += r.Lost + r.Throttled
		if r.ModeOnly {
			continue
		}
		samples += r.Samples
		attributed += r.Attributed
		addressed += r.Addressed
		right += r.AddressRight
	}
	n := len(runs)
	share := func(fig string, num, den int, bound float64, atLeast bool, what string) Row {
		r := Row{Sampler: name, Figure: fig, Bound: bound, Runs: n}
		if den == 0 {
			r.Verdict, r.Reason = validate.NotMeasurable, "no "+what
			return r
		}
		r.Value = float64(num) / float64(den)
		r.Verdict = verdict(atLeast && r.Value >= bound || !atLeast && r.Value <= bound)
		return r
	}
	rows = append(rows, share(Attribution, attributed, samples, th.Attribution, true, "samples"))
	rows = append(rows, share(Address, right, addressed, th.Address, true, "data address to check"))
	rows = append(rows, share(ModeLeak, wrongMode, all, th.ModeLeak, false, "samples"))
	lossRow := Row{Sampler: name, Figure: Loss, Bound: th.Loss, Runs: n}
	if total := float64(all) + float64(lost); total > 0 {
		lossRow.Value = float64(lost) / total
		lossRow.Verdict = verdict(lossRow.Value <= th.Loss)
	} else {
		lossRow.Verdict, lossRow.Reason = validate.NotMeasurable, "no samples"
	}
	return append(rows, lossRow)
}

// accuracy is one period's mean accuracy (figure Accuracy, or
// SubsetAccuracy), captured ÷ (events ÷ period) with the events and
// samples of each run that of gives, and its standard error over the runs
// (figure Stability, or the subset's "subset_stability"). A run expected
// to give few samples is allowed one sample more or fewer than its
// expectation: the kernel samples at every period's overflow, so a run's
// count is its expectation rounded either way.
func accuracy(name, figure string, period uint64, runs []Run, th Thresholds, of func(Run) (float64, int)) []Row {
	var accs []float64
	expected := 0.0
	for _, r := range runs {
		events, samples := of(r)
		e := events / float64(period)
		if e <= 0 {
			continue
		}
		expected += e
		accs = append(accs, float64(samples)/e)
	}
	stability := Stability
	if figure == SubsetAccuracy {
		stability = SubsetStability
	}
	acc := Row{Sampler: name, Figure: figure, Period: period, Runs: len(accs)}
	stab := Row{Sampler: name, Figure: stability, Period: period, Bound: th.Stability, Runs: len(accs)}
	if len(accs) == 0 {
		acc.Verdict, acc.Reason = validate.NotMeasurable, "no events in the runs"
		stab.Verdict, stab.Reason = validate.NotMeasurable, acc.Reason
		return []Row{acc, stab}
	}
	mean, se := meanSE(accs)
	perRun := expected / float64(len(accs))
	tol := math.Max(th.Accuracy, 1/perRun) // one sample either way
	acc.Value, acc.Bound = mean, tol
	acc.Verdict = verdict(math.Abs(mean-1) <= tol)
	if acc.Verdict == validate.Fail {
		acc.Reason = fmt.Sprintf("%.4g of the %.4g samples a run should give, on average", mean*perRun, perRun)
	}
	stab.Value = se
	switch {
	case len(accs) < 2:
		stab.Verdict, stab.Reason = validate.NotMeasurable, "one run"
	default:
		stab.Verdict = verdict(se <= math.Max(th.Stability, 1/perRun/math.Sqrt(float64(len(accs)))))
	}
	return []Row{acc, stab}
}

// bias is one period's total variation distance between the samples'
// shares over the instructions (or functions) that made the events and
// their known shares. Sampling alone spreads the shares by their binomial
// standard error, so the bound is Bias or three standard errors of the
// largest share, whichever is larger. It is per period: a period in step
// with the code (every second event from one instruction, an even period)
// takes all its samples from one, which is bias of that period.
func bias(name string, period uint64, runs []Run, bound float64) Row {
	shares := map[string]*Share{}
	var order []string
	for _, r := range runs {
		for _, s := range r.Shares {
			if shares[s.Name] == nil {
				shares[s.Name] = &Share{Name: s.Name}
				order = append(order, s.Name)
			}
			shares[s.Name].Samples += s.Samples
			shares[s.Name].Expected += s.Expected
		}
	}
	r := Row{Sampler: name, Figure: Bias, Period: period, Runs: len(runs)}
	var in int
	var expected float64
	for _, n := range order {
		in += shares[n].Samples
		expected += shares[n].Expected
	}
	if len(order) < 2 || in == 0 || expected <= 0 {
		r.Verdict, r.Reason = validate.NotMeasurable, "no loop with several instructions of known shares"
		r.Bound = bound
		return r
	}
	tvd, noise := 0.0, 0.0
	for _, n := range order {
		p := shares[n].Expected / expected
		tvd += math.Abs(float64(shares[n].Samples)/float64(in) - p)
		noise = math.Max(noise, 3*math.Sqrt(p*(1-p)/float64(in)))
	}
	r.Value, r.Bound = tvd/2, math.Max(bound, noise)
	r.Verdict = verdict(r.Value <= r.Bound)
	return r
}

func meanSE(xs []float64) (mean, se float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

func verdict(ok bool) validate.Verdict {
	if ok {
		return validate.Pass
	}
	return validate.Fail
}

// Passed says whether every figure of a sampler that could be measured
// passed, and whether any was measured.
func Passed(rows []Row) (passed, measured bool) {
	passed = true
	for _, r := range rows {
		switch r.Verdict {
		case validate.Fail:
			passed, measured = false, true
		case validate.Pass:
			measured = true
		}
	}
	return passed && measured, measured
}
