package reuse

import (
	"math"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/watchbudget"
)

// A trace whose threads' CPU time advances 2 ns an access, replayed on
// the time clock, is the access-clock replay scaled by two: the harness
// samples and arms alike (sampling goes by accesses), so every reuse
// moves up exactly one log2 bin and the horizon doubles; the estimated
// shares move with them, within 0.5% (watches censored at age 0, a
// sample taking the slot of a watch whose owner has not run since, stay
// in the first bin on either clock).
func TestTimedTraceIsTheAccessTraceTwice(t *testing.T) {
	c := Case{Name: "timed", Distances: []uint64{64, 256, 1024}, Counts: []int{30, 10, 4}, Invalidate: 0.3, Outer: 2}
	var trace []Access
	n := map[uint32]uint64{}
	c.Generate(2, 7, func(a Access) {
		n[a.TID]++
		a.Time = 2 * n[a.TID]
		trace = append(trace, a)
	})
	run := func(timed bool) *Tracker {
		r := NewReplay(ReplayOptions{Options: Options{Seed: 1}, Period: 100, Timed: timed})
		for _, a := range trace {
			r.Access(a)
		}
		r.Finish()
		return r.Tracker
	}
	accT, nsT := run(false), run(true)
	for k := 0; k+1 < Bins; k++ {
		if accT.Distance[k] != nsT.Distance[k+1] {
			t.Errorf("reuses observed at bin %d: %d in accesses, %d at bin %d in ns", k, accT.Distance[k], nsT.Distance[k+1], k+1)
		}
	}
	acc, ns := accT.Estimate(), nsT.Estimate()
	if ns.Horizon != 2*acc.Horizon {
		t.Errorf("horizon %d ns, %d accesses: want twice", ns.Horizon, acc.Horizon)
	}
	if acc.Bins[Bins-1].Share != 0 {
		t.Fatal("the last bin has a share: the shift would drop it")
	}
	resolved := 0.0
	for k := 0; k+1 < Bins; k++ {
		a, b := acc.Bins[k], ns.Bins[k+1]
		if math.Abs(a.Share-b.Share) > 0.005*a.Share || a.Observed != b.Observed {
			t.Errorf("bin %d: %v (%d observed) in accesses, bin %d: %v (%d) in ns", k, a.Share, a.Observed, k+1, b.Share, b.Observed)
		}
		resolved += a.Share
	}
	if ns.Bins[0].Share != 0 || resolved == 0 {
		t.Errorf("ns bin 0 %v, resolved share %v", ns.Bins[0].Share, resolved)
	}
	r := NewReplay(ReplayOptions{Period: 100, Timed: true})
	if err := r.Run(strings.NewReader("1 R 0x10 8 4\n1 R 0x10 8\n")); err == nil || !strings.Contains(err.Error(), "line 2: no time") {
		t.Errorf("an untimed access in a timed replay: %v", err)
	}
}

// A governed replay keeps the traps' cost within the budget of the CPU
// time the trace's threads ran, as live: one thread walking 64 locations,
// an access a microsecond, traps costing 50 µs at a 1% budget, so 0.2 s
// of CPU pays for about 40 traps of the thousands an ungoverned run makes.
// Every sample is either the tracker's or denied.
func TestGovernedReplay(t *testing.T) {
	const accesses, cost, budget = 200_000, 50e-6, 0.01
	run := func(g *watchbudget.Budget) *Replay {
		r := NewReplay(ReplayOptions{Options: Options{Seed: 1, Own: DefaultOwn}, Period: 100, Governor: g})
		for i := range uint64(accesses) {
			r.Access(Access{TID: 1, Addr: 0x1000 + 8*(i%64), Size: 8, Time: (i + 1) * 1000})
		}
		return r
	}
	free := run(nil)
	g := watchbudget.New(budget, cost, 1)
	governed := run(g)
	tot := g.Totals()
	t.Logf("ungoverned: %d traps, %d samples; governed: %d traps, %d samples, %d denied, CPU %.6f s, spent %.6f s",
		free.Traps, free.Tracker.Samples, governed.Traps, governed.Tracker.Samples, tot.Denied, tot.CPU, tot.Spent)
	if tot.CPU < 0.199 || tot.CPU > 0.2 {
		t.Errorf("the governor saw %.6f s of CPU time, want the trace's 0.2 s from its first sample on", tot.CPU)
	}
	// A sample arms an own slot and may arm the global one: two traps at
	// most beyond what the budget allowed when it was let through.
	if tot.Spent > budget*tot.CPU+cost+2*cost || tot.Spent < budget*tot.CPU-3*cost {
		t.Errorf("traps cost %.6f s, want about the budget's %.6f s", tot.Spent, budget*tot.CPU)
	}
	if governed.Traps != tot.Traps || governed.Traps >= free.Traps/10 {
		t.Errorf("governed %d traps (the governor counted %d), ungoverned %d", governed.Traps, tot.Traps, free.Traps)
	}
	if tot.Denied == 0 || governed.Tracker.Samples+tot.Denied != free.Tracker.Samples {
		t.Errorf("%d samples the tracker's, %d denied, want the %d samples all told", governed.Tracker.Samples, tot.Denied, free.Tracker.Samples)
	}
}

// A governed trace must time every access.
func TestGovernedReplayNeedsTimes(t *testing.T) {
	r := NewReplay(ReplayOptions{Governor: watchbudget.New(0.01, 1e-5, 1)})
	err := r.Run(strings.NewReader("1 R 0x1000 8 100\n1 R 0x1008 8\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("an untimed access in a governed replay: %v, want an error naming line 2", err)
	}
}
