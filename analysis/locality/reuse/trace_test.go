package reuse

import (
	"math"
	"strings"
	"testing"
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
