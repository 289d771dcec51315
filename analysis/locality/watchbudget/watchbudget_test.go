package watchbudget

import (
	"math"
	"testing"
)

// At 1% of CPU time and 25 µs a trap, a target that ran 1 s may trap 400
// times (10 ms), plus the allowance; then arms wait until it runs more.
func TestBudgetByHand(t *testing.T) {
	g := New(0.01, 25e-6, 4)
	if !g.Allow(7) { // a target not yet read gets the allowance
		t.Fatal("denied before the first reading")
	}
	g.Ran(7, 100) // first read: its earlier 100 s do not count
	allowed := 0
	for g.Allow(7) {
		g.Trapped(7, 1)
		allowed++
	}
	if allowed != 4 {
		t.Fatalf("before running: %d traps allowed, want the allowance of 4", allowed)
	}
	if !g.Over(7) {
		t.Error("not over budget after its allowance")
	}
	g.Ran(7, 101)
	if g.Over(7) {
		t.Error("over budget after running 1 s")
	}
	for g.Allow(7) {
		g.Trapped(7, 1)
		allowed++
	}
	if allowed != 404 {
		t.Errorf("after 1 s: %d traps allowed in all, want 400 + 4", allowed)
	}
	g.Ran(7, 100.5) // a smaller reading (a new process with the pid) is not negative time
	if g.Allow(7) {
		t.Error("allowed with no more CPU time")
	}
	tot := g.Totals()
	if tot.Traps != 404 || tot.Denied != 3 || math.Abs(tot.CPU-1) > 1e-9 || math.Abs(tot.Spent-404*25e-6) > 1e-12 {
		t.Errorf("totals %+v", tot)
	}
	// Traps that come anyway (armed before) are charged: the budget is
	// owed before the next arm.
	g.Trapped(7, 200)
	g.Ran(7, 101.5)
	if g.Allow(7) {
		t.Error("allowed while 605 traps would cost more than 1% of 1.5 s + the allowance")
	}
	g.Forget(7)
	if after := g.Totals(); after.Traps != 604 || after.Denied != 4 {
		t.Errorf("a target gone lost its totals: %+v", after)
	}
}

// An allowed sample is expected to cost what the allowed ones cost on
// average: after three that trapped 350 times in all (≈117 each), one more
// would take a 400-trap budget to ≈467: refused, although one more trap
// would still fit.
func TestExpectedTrapsPerSample(t *testing.T) {
	g := New(0.01, 25e-6, 0)
	g.Ran(1, 0)
	g.Ran(1, 1) // 10 ms: 400 traps
	for range 3 {
		if !g.Allow(1) {
			t.Fatal("refused within budget")
		}
	}
	g.Trapped(1, 350)
	if g.Allow(1) {
		t.Error("allowed a sample expected to cost 117 traps with 50 left")
	}
	g2 := New(0.01, 25e-6, 0)
	g2.Ran(1, 0)
	g2.Ran(1, 1)
	g2.Allow(1)
	g2.Trapped(1, 10) // ten a sample: 390 left
	if !g2.Allow(1) {
		t.Error("refused a sample expected to cost 10 traps with 390 left")
	}
}
