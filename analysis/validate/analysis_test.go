package validate

import (
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/model"
)

// By hand: counts 3·l + 28 lie on a line of slope 3, r² 1; CAT's goodness
// of a slope 0.5 off is exp(−2·0.25) = 0.607 (the notes: "a 0.5 error
// scores 0.61"), and a slope right but scattered (r² 0.8) is marked down.
func TestFitAndGoodnessByHand(t *testing.T) {
	f, err := LeastSquares([]float64{1, 2, 3, 4}, []float64{31, 34, 37, 40})
	if err != nil || math.Abs(f.Slope-3) > 1e-12 || math.Abs(f.Intercept-28) > 1e-12 || math.Abs(f.R2-1) > 1e-12 {
		t.Fatalf("fit %+v, %v", f, err)
	}
	if g := Goodness(Fit{Slope: 1.5, R2: 1}, 2); math.Abs(g-math.Exp(-0.5)) > 1e-12 {
		t.Errorf("goodness of 1.5 against 2 = %v", g)
	}
	if g := Goodness(Fit{Slope: 2, R2: 0.8}, 2); math.Abs(g-math.Exp(-2*0.16)) > 1e-12 {
		t.Errorf("goodness of a scattered 2 = %v", g)
	}
	// (x, y) = (1, 1), (2, 3), (3, 2): slope 0.5, r² = 0.25.
	f, _ = LeastSquares([]float64{1, 2, 3}, []float64{1, 3, 2})
	if math.Abs(f.Slope-0.5) > 1e-12 || math.Abs(f.R2-0.25) > 1e-12 {
		t.Errorf("fit %+v, want slope 0.5, r² 0.25", f)
	}
	if _, err := LeastSquares([]float64{5, 5}, []float64{1, 2}); err == nil {
		t.Error("a fit over one size")
	}
	// A deliberately wrong expectation fails: page faults counted one per
	// page, expected two.
	sizes := []float64{64, 128, 256, 512}
	counts := []float64{65, 129, 257, 513}
	if r := Judge("page-faults", "fresh-pages", 1, sizes, counts); r.Verdict != Pass {
		t.Errorf("%+v", r)
	}
	if r := Judge("page-faults", "fresh-pages", 2, sizes, counts); r.Verdict != Fail || r.Reason == "" {
		t.Errorf("a wrong expectation passed: %+v", r)
	}
}

type fixture struct {
	Sizes  []float64 `json:"sizes"`
	Events []struct {
		Event    string       `json:"event"`
		Category Category     `json:"category"`
		Counts   [7][]float64 `json:"counts"`
	} `json:"events"`
	Instructions struct {
		Event  string    `json:"event"`
		Loop   []float64 `json:"loop"`
		Counts []float64 `json:"counts"`
	} `json:"instructions"`
}

// Recorded counts of amd64 branch events (testdata/recorded-amd64.json)
// through the analysis: each event of the right category passes with its
// seven-loop signature; one labelled CE that counts taken branches is
// rejected and named as T; the instruction loop's count is 3 per
// iteration.
func TestRecordedAmd64(t *testing.T) {
	b, err := os.ReadFile("testdata/recorded-amd64.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	for _, ev := range fx.Events {
		rows := JudgeBranches(ev.Event, ev.Category, fx.Sizes, ev.Counts)
		if len(rows) != 8 {
			t.Fatalf("%s: %d rows", ev.Event, len(rows))
		}
		sig := rows[7]
		wrong := ev.Event == "BR_INST_EXEC.ALL_CONDITIONAL"
		if wrong {
			if sig.Verdict != Fail {
				t.Errorf("%s counts taken branches but passed as %s: %+v", ev.Event, ev.Category, sig)
			}
			t.Logf("rejected: %s", sig.Reason)
			continue
		}
		if sig.Verdict != Pass {
			t.Errorf("%s (%s): %+v", ev.Event, ev.Category, sig)
		}
		for _, r := range rows[:7] {
			if r.Verdict != Pass {
				t.Errorf("%s on %s: %+v", ev.Event, r.Loop, r)
			}
		}
	}
	var fits [7]Fit
	for _, ev := range fx.Events {
		if ev.Event == "BR_INST_EXEC.ALL_CONDITIONAL" {
			for k := range 7 {
				fits[k], _ = LeastSquares(fx.Sizes, ev.Counts[k])
			}
		}
	}
	if c, _ := Classify(fits); c != T {
		t.Errorf("the mislabelled event classified %s, want T", c)
	}
	in := fx.Instructions
	if r := Judge(in.Event, "instruction-loop", 3, in.Loop, in.Counts); r.Verdict != Pass || r.Slope != 3 || r.R2 != 1 {
		t.Errorf("%+v", r)
	}
}

// Every category's own signature classifies as itself.
func TestSignaturesDistinct(t *testing.T) {
	sizes := []float64{1, 2, 4, 8}
	for _, c := range categories {
		var fits [7]Fit
		for k := range 7 {
			var counts []float64
			for _, s := range sizes {
				counts = append(counts, Signatures[c][k]*s+10)
			}
			fits[k], _ = LeastSquares(sizes, counts)
		}
		if got, scores := Classify(fits); got != c || scores[c] != 1 {
			t.Errorf("%s's signature classified %s (%v)", c, got, scores)
		}
	}
}

// Quartiles by nearest rank over 1…9 µs: median 5, min 1, IQR 7 − 3 = 4.
func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for _, v := range []int{9, 1, 8, 2, 7, 3, 6, 4, 5} {
		ds = append(ds, time.Duration(v)*time.Microsecond)
	}
	s := Summarize(ds)
	if s.Median != 5*time.Microsecond || s.Min != time.Microsecond || s.IQR != 4*time.Microsecond || s.N != 9 {
		t.Errorf("%+v", s)
	}
}

// An L1d miss event over a chase from 16 KiB to 256 KiB with a 32 KiB L1d:
// 0.01 a step at 16 KiB, 0.98 from 64 KiB on: pass; an event that stays
// at 0.02 (an L2 miss event, mislabelled) fails; one whose sweep never
// leaves the cache is not measurable.
func TestJudgeStepByHand(t *testing.T) {
	sizes := []float64{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10}
	if r := JudgeStep("L1-dcache-load-misses", "pointer-chase", 32<<10, sizes, []float64{0.01, 0.4, 0.98, 0.99, 0.99}); r.Verdict != Pass || r.Slope != 0.9867 {
		t.Errorf("%+v", r)
	}
	if r := JudgeStep("L1-dcache-load-misses", "pointer-chase", 32<<10, sizes, []float64{0.01, 0.01, 0.02, 0.02, 0.02}); r.Verdict != Fail {
		t.Errorf("%+v", r)
	}
	if r := JudgeStep("LLC-load-misses", "pointer-chase", 32<<20, sizes, []float64{0, 0, 0, 0, 0}); r.Verdict != NotMeasurable {
		t.Errorf("%+v", r)
	}
}

// Pinned 1,000,000 cycles; three copies that ran a third of the time each
// and counted 330,000, 340,000 and 0 (never ran): scaled 990,000 and
// 1,020,000, so −1% and +2%: mean +0.5%, worst +2%.
func TestMultiplexErrorByHand(t *testing.T) {
	mean, worst, ok := MultiplexError(1_000_000, []model.Reading{
		{Count: 330_000, Enabled: 3_000, Running: 1_000},
		{Count: 340_000, Enabled: 3_000, Running: 1_000},
		{Count: 0, Enabled: 3_000, Running: 0},
	})
	if !ok || math.Abs(mean-0.005) > 1e-9 || math.Abs(worst-0.02) > 1e-9 {
		t.Errorf("mean %v, worst %v, ok %v", mean, worst, ok)
	}
	if _, _, ok := MultiplexError(0, []model.Reading{{Count: 1, Enabled: 1, Running: 1}}); ok {
		t.Error("a pinned copy that counted nothing")
	}
}
