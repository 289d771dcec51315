package sampler

import (
	"math"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
)

func row(t *testing.T, rows []Row, figure string, period uint64) Row {
	t.Helper()
	for _, r := range rows {
		if r.Figure == figure && r.Period == period {
			return r
		}
	}
	t.Fatalf("no %s row for period %d in %+v", figure, period, rows)
	return Row{}
}

var th = Thresholds{Accuracy: 0.01, Stability: 0.01, Bias: 0.02, Attribution: 0.99, Address: 0.99, ModeLeak: 0.001, Loss: 0.01}

// By hand: three runs of 4096 events at period 16 should give 256 samples
// each; 256, 256 and 250 are accuracies 1, 1 and 0.9765625: mean
// 0.9921875 (within 1%), standard error sqrt(((1/128)²·2 + (1/64)²)/2)/√3
// = 1/128. Sampled as if the period were 32 (a sampler whose period is
// wrong), the accuracy is 0.5 and fails.
func TestAccuracyAndStabilityByHand(t *testing.T) {
	runs := []Run{{Period: 16, Events: 4096, Samples: 256}, {Period: 16, Events: 4096, Samples: 256}, {Period: 16, Events: 4096, Samples: 250}}
	rows := Judge("page-faults", runs, th)
	acc, stab := row(t, rows, Accuracy, 16), row(t, rows, Stability, 16)
	if acc.Value != 0.9921875 || acc.Verdict != validate.Pass || acc.Runs != 3 {
		t.Errorf("accuracy %+v, want 0.9921875, pass", acc)
	}
	if math.Abs(stab.Value-1.0/128) > 1e-12 || stab.Verdict != validate.Pass {
		t.Errorf("stability %+v, want 1/128, pass", stab)
	}
	for i := range runs {
		runs[i].Samples = 128
	}
	if acc := row(t, Judge("page-faults", runs, th), Accuracy, 16); acc.Value != 0.5 || acc.Verdict != validate.Fail {
		t.Errorf("half the samples: %+v, want 0.5, fail", acc)
	}
	// Four events at period 1 expected, five caught: one sample over is
	// within a run's rounding (bound 1/4), six is not.
	few := []Run{{Period: 1, Events: 4, Samples: 5}}
	if acc := row(t, Judge("x", few, th), Accuracy, 1); acc.Verdict != validate.Pass || acc.Bound != 0.25 {
		t.Errorf("one over four: %+v", acc)
	}
	few[0].Samples = 6
	if acc := row(t, Judge("x", few, th), Accuracy, 1); acc.Verdict != validate.Fail {
		t.Errorf("two over four: %+v", acc)
	}
	if stab := row(t, Judge("x", few, th), Stability, 1); stab.Verdict != validate.NotMeasurable {
		t.Errorf("stability of one run: %+v", stab)
	}
}

// By hand: 600 and 400 samples from two instructions that each made half
// the events are 0.1 from their shares (TVD), beyond three binomial
// standard errors of a half over 1,000 samples (0.0474): biased. 510 and
// 490 are 0.01: within.
func TestBiasByHand(t *testing.T) {
	runs := []Run{{Period: 1, Events: 1000, Samples: 1000, Shares: []Share{{"a", 600, 500}, {"b", 400, 500}}}}
	b := row(t, Judge("x", runs, th), Bias, 1)
	if math.Abs(b.Value-0.1) > 1e-12 || math.Abs(b.Bound-3*math.Sqrt(0.25/1000)) > 1e-12 || b.Verdict != validate.Fail {
		t.Errorf("600/400: %+v", b)
	}
	runs[0].Shares = []Share{{"a", 510, 500}, {"b", 490, 500}}
	if b := row(t, Judge("x", runs, th), Bias, 1); math.Abs(b.Value-0.01) > 1e-12 || b.Verdict != validate.Pass {
		t.Errorf("510/490: %+v", b)
	}
	runs[0].Shares = runs[0].Shares[:1]
	if b := row(t, Judge("x", runs, th), Bias, 1); b.Verdict != validate.NotMeasurable {
		t.Errorf("one instruction: %+v", b)
	}
}

// By hand: the shares, each against its bound: 990 of 1,000 samples
// attributed (0.99, pass at 0.99), 980 of 1,000 addresses right (0.98,
// fail), 2 of 1,000 in kernel mode (0.002, fail at 0.001), 10 lost beside
// 1,000 samples (10 of 1,010 records, pass at 0.01).
func TestSharesByHand(t *testing.T) {
	runs := []Run{{Period: 1, Events: 1000, Samples: 1000, Lost: 10, Attributed: 990, Addressed: 1000, AddressRight: 980, WrongMode: 2}}
	rows := Judge("x", runs, th)
	for _, c := range []struct {
		fig   string
		value float64
		want  validate.Verdict
	}{{Attribution, 0.99, validate.Pass}, {Address, 0.98, validate.Fail}, {ModeLeak, 0.002, validate.Fail}, {Loss, 10.0 / 1010, validate.Pass}} {
		if r := row(t, rows, c.fig, 0); math.Abs(r.Value-c.value) > 1e-12 || r.Verdict != c.want {
			t.Errorf("%s: %+v, want %v %s", c.fig, r, c.value, c.want)
		}
	}
	if passed, measured := Passed(rows); passed || !measured {
		t.Errorf("Passed = %v, %v with failures", passed, measured)
	}
	if r := row(t, Judge("x", []Run{{Period: 1, Events: 10}}, th), Address, 0); r.Verdict != validate.NotMeasurable {
		t.Errorf("no address checked: %+v", r)
	}
}

// A mode-only run (work in both modes) counts for the mode leak and the
// loss, not for accuracy or attribution: by hand, a run of 100 samples
// all attributed and a mode-only one of 50 with 5 in the wrong mode give
// attribution 100/100 and a mode leak of 5/150.
func TestModeOnlyRunsByHand(t *testing.T) {
	runs := []Run{{Period: 10, Events: 1000, Samples: 100, Attributed: 100}, {Period: 10, Events: 99999, Samples: 50, WrongMode: 5, ModeOnly: true}}
	rows := Judge("x", runs, th)
	if r := row(t, rows, Accuracy, 10); r.Value != 1 || r.Runs != 1 {
		t.Errorf("accuracy %+v, want 1 over the one run", r)
	}
	if r := row(t, rows, Attribution, 0); r.Value != 1 {
		t.Errorf("attribution %+v", r)
	}
	if r := row(t, rows, ModeLeak, 0); math.Abs(r.Value-5.0/150) > 1e-12 || r.Verdict != validate.Fail {
		t.Errorf("mode leak %+v, want 5/150, fail", r)
	}
}

// By hand, IBS op's subset: two runs at period 100 sampled 1,000 ops each
// (the event's count 100,000), 10 and 12 of them loads of a loop that made
// 1,100 loads a run (11 expected): subset accuracies 10/11 and 12/11,
// mean 1, standard error ((1/11)²·2/1)^½/√2 = 1/11: beyond both 1% and
// the 1/11/√2 (0.064) that two runs of 11 samples allow, so it fails, as
// the thesis found IBS's loads unstable. The whole op accuracy is 1. A run
// with no subset gives no subset rows.
func TestSubsetAccuracyByHand(t *testing.T) {
	runs := []Run{
		{Period: 100, Events: 100_000, Samples: 1000, SubsetEvents: 1100, SubsetSamples: 10},
		{Period: 100, Events: 100_000, Samples: 1000, SubsetEvents: 1100, SubsetSamples: 12},
	}
	rows := Judge("ibs_op", runs, th)
	if r := row(t, rows, Accuracy, 100); r.Value != 1 || r.Verdict != validate.Pass {
		t.Errorf("op accuracy %+v", r)
	}
	if r := row(t, rows, SubsetAccuracy, 100); math.Abs(r.Value-1) > 1e-12 || r.Verdict != validate.Pass || r.Bound != 1.0/11 {
		t.Errorf("subset accuracy %+v, want 1 within 1/11 (one sample of 11)", r)
	}
	if r := row(t, rows, SubsetStability, 100); math.Abs(r.Value-1.0/11) > 1e-12 || r.Verdict != validate.Fail {
		t.Errorf("subset stability %+v, want 1/11, failing", r)
	}
	for _, r := range Judge("ibs_op", []Run{{Period: 100, Events: 100_000, Samples: 1000}}, th) {
		if r.Figure == SubsetAccuracy || r.Figure == SubsetStability {
			t.Errorf("a subset row without a subset: %+v", r)
		}
	}
}
