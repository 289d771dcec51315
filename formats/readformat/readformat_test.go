package readformat

import (
	"math"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// read builds the bytes the kernel returns for a group read and decodes them, so the
// tests run the same path as a live read.
func read(t *testing.T, enabled, running uint64, values ...uint64) Reading {
	t.Helper()
	ids := make([]uint64, len(values))
	for i := range ids {
		ids[i] = uint64(100 + i)
	}
	// The kernel may list members in any order; shuffle to prove decoding goes by id.
	rids, rvals := append([]uint64(nil), ids...), append([]uint64(nil), values...)
	for i, j := 0, len(rids)-1; i < j; i, j = i+1, j-1 {
		rids[i], rids[j] = rids[j], rids[i]
		rvals[i], rvals[j] = rvals[j], rvals[i]
	}
	out := make([]uint64, len(values))
	e, r, err := perf.DecodeGroupRead(perf.EncodeGroupRead(enabled, running, rids, rvals), ids, out)
	if err != nil {
		t.Fatal(err)
	}
	return Reading{Enabled: e, Running: r, Values: out}
}

func TestNoMultiplexing(t *testing.T) {
	a := New(2)
	if !a.Add(read(t, 100, 100, 50, 7)) {
		t.Fatal("group that ran reported as not running")
	}
	a.Add(read(t, 200, 200, 120, 9))
	if a.Totals[0] != 120 || a.Totals[1] != 9 {
		t.Errorf("totals = %v, want [120 9]", a.Totals)
	}
	if a.EnabledNS != 200 || a.RunningNS != 200 || a.NotRunning != 0 || a.Intervals != 2 {
		t.Errorf("times = %+v", a)
	}
}

func TestMultiplexedIntervalsScaleSeparately(t *testing.T) {
	a := New(1)
	a.Add(read(t, 100, 50, 40)) // ran half the interval: 40 × 100/50 = 80
	if a.Totals[0] != 80 {
		t.Fatalf("after first interval total = %d, want 80", a.Totals[0])
	}
	a.Add(read(t, 300, 100, 70)) // Δ30 × Δ200/Δ50 = 120
	if a.Totals[0] != 200 {
		t.Errorf("total = %d, want 200", a.Totals[0])
	}
	if a.EnabledNS != 300 || a.RunningNS != 100 {
		t.Errorf("enabled/running = %d/%d, want 300/100", a.EnabledNS, a.RunningNS)
	}
}

func TestIntervalWithoutRunningYieldsNoValue(t *testing.T) {
	a := New(1)
	if a.Add(read(t, 100, 0, 0)) { // enabled only: the PMU never scheduled the group
		t.Fatal("running=0 interval reported as ran")
	}
	if a.Totals[0] != 0 || a.NotRunning != 1 {
		t.Fatalf("after running=0: totals %v, not-running %d", a.Totals, a.NotRunning)
	}
	// Then it runs for 50 of the next 100 ns: only that interval is scaled,
	// 10 × 100/50 = 20; the interval that did not run is not extrapolated.
	if !a.Add(read(t, 200, 50, 10)) {
		t.Fatal("interval that ran reported as not running")
	}
	if a.Totals[0] != 20 || a.NotRunning != 1 || a.Intervals != 2 {
		t.Errorf("total = %d (not running %d), want 20 (1)", a.Totals[0], a.NotRunning)
	}
	// Nothing enabled either (a stopped CPU): also no value.
	if a.Add(read(t, 200, 50, 10)) || a.NotRunning != 2 {
		t.Error("idle interval counted as ran")
	}
}

func TestCounterWrap(t *testing.T) {
	a := New(1)
	a.Add(read(t, 10, 10, math.MaxUint64-9))
	before := a.Totals[0]
	a.Add(read(t, 20, 20, 5)) // the raw counter wrapped: Δ = 10 + 5
	if got := a.Totals[0] - before; got != 15 {
		t.Errorf("interval delta = %d, want 15", got)
	}
}

func TestRebaseKeepsTotals(t *testing.T) {
	a := New(1)
	a.Add(read(t, 100, 100, 1000))
	a.Rebase() // group reopened after hotplug: its counters start again from zero
	a.Add(read(t, 50, 50, 30))
	if a.Totals[0] != 1030 || a.EnabledNS != 150 {
		t.Errorf("total = %d enabled = %d, want 1030, 150", a.Totals[0], a.EnabledNS)
	}
}

func TestScale(t *testing.T) {
	cases := []struct{ delta, e, r, want uint64 }{
		{1000, 3, 3, 1000},
		{1, 3, 2, 2},                         // 1.5 rounds up
		{1, 5, 4, 1},                         // 1.25 rounds down
		{10, 1e9, 4e8, 25},                   // 10 × 2.5
		{1 << 62, 1 << 40, 1 << 39, 1 << 63}, // product needs 102 bits
		{1 << 63, 4, 1, math.MaxUint64},      // saturates
		{7, 9, 0, 7},                         // running = 0 is the caller's case; no division by zero
	}
	for _, c := range cases {
		if got := Scale(c.delta, c.e, c.r); got != c.want {
			t.Errorf("Scale(%d, %d, %d) = %d, want %d", c.delta, c.e, c.r, got, c.want)
		}
	}
}

func FuzzScale(f *testing.F) {
	f.Add(uint64(10), uint64(100), uint64(40))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(1))
	f.Fuzz(func(t *testing.T, delta, e, r uint64) {
		if r == 0 || e < r {
			return // the kernel guarantees enabled >= running
		}
		got := Scale(delta, e, r)
		if got < delta {
			t.Fatalf("Scale(%d,%d,%d) = %d shrank the count", delta, e, r, got)
		}
		// Compare with float arithmetic where it is exact enough.
		if delta < 1<<40 && e < 1<<40 {
			want := math.Round(float64(delta) * float64(e) / float64(r))
			if math.Abs(float64(got)-want) > 1 {
				t.Fatalf("Scale(%d,%d,%d) = %d, float says %v", delta, e, r, got, want)
			}
		}
	})
}
