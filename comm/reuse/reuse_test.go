package reuse

import (
	"math/bits"
	"strings"
	"testing"
)

// replayOf is a harness that never samples by itself (the tests sample
// by hand), with one slot.
func replayOf(mode Mode, delay uint64, domain func(uint32) int) *Replay {
	return NewReplay(ReplayOptions{Options: Options{Mode: mode, Slots: 1, Domain: domain}, Period: 1 << 40, ArmDelay: delay})
}

func access(r *Replay, tid uint32, write bool, addr uint64) {
	r.Access(Access{TID: tid, Write: write, Addr: addr, Size: 8})
}

// Hand-traced: thread 1 samples its first access to A; thread 2's read
// of A does not trap (its register is write-only), three accesses later
// thread 1 reuses A: time distance 3 on its own clock, bin 1.
func TestPrivateReuseByHand(t *testing.T) {
	r := replayOf(Private, 0, nil)
	access(r, 2, false, 0x9000) // thread 2 exists
	access(r, 1, false, 0xA000)
	r.Tracker.Sample(1, 0xA000, 8, 1)
	access(r, 2, false, 0xA000) // a remote read: no trap
	access(r, 1, false, 0xB000)
	access(r, 1, false, 0xC000)
	access(r, 1, true, 0xA004) // overlaps A's 8 bytes
	tr := r.Tracker
	if tr.Reuses != 1 || tr.Invalidations != 0 || tr.Distance[1] != 1 {
		t.Errorf("reuses %d invalidations %d bins %v, want one reuse at distance 3", tr.Reuses, tr.Invalidations, tr.Raw())
	}
	// One outcome per sample: the slot is free, nothing traps again.
	access(r, 1, false, 0xA000)
	if tr.Reuses != 1 || tr.Slots() != 0 {
		t.Errorf("a second trap: reuses %d, %d slots busy", tr.Reuses, tr.Slots())
	}
}

// A remote store between use and reuse is an invalidation; with an arm
// delay, accesses right after the sample do not trap yet.
func TestInvalidationAndArmDelay(t *testing.T) {
	// A thread that starts after the sample is armed too.
	late := replayOf(Private, 0, nil)
	access(late, 1, false, 0xA000)
	late.Tracker.Sample(1, 0xA000, 8, 1)
	access(late, 3, true, 0xA000)
	if late.Tracker.Invalidations != 1 {
		t.Errorf("a thread started after the sample: %d invalidations", late.Tracker.Invalidations)
	}

	r := replayOf(Private, 2, nil)
	access(r, 2, false, 0x9000)
	access(r, 1, false, 0xA000)
	r.Tracker.Sample(1, 0xA000, 8, 1)
	access(r, 2, true, 0xA000) // within the delay: missed
	access(r, 1, false, 0xB000)
	access(r, 2, true, 0xA000) // armed now
	if r.Tracker.Invalidations != 1 || r.Tracker.Reuses != 0 {
		t.Errorf("invalidations %d reuses %d, want the second remote store only", r.Tracker.Invalidations, r.Tracker.Reuses)
	}
}

// Shared mode: a thread of the sampler's domain reusing the line is a
// shared-cache reuse at the domain clock's distance; a store from another
// domain is an invalidation; the sampler's own reuse is not counted here.
func TestSharedByHand(t *testing.T) {
	dom := func(tid uint32) int { return int(tid) / 10 }
	r := replayOf(Shared, 0, dom)
	access(r, 11, false, 0x9000)
	access(r, 20, false, 0x9000)
	access(r, 10, false, 0xA000) // domain 1 clock: 2
	r.Tracker.Sample(10, 0xA000, 8, 2)
	access(r, 10, false, 0xA000) // the sampler itself: not armed
	access(r, 11, false, 0xA000) // domain 1 clock 4: reuse at 2
	if tr := r.Tracker; tr.Reuses != 1 || tr.Distance[1] != 1 {
		t.Errorf("shared reuse: %d, bins %v", tr.Reuses, tr.Raw())
	}
	access(r, 10, false, 0xB000)
	r.Tracker.Sample(10, 0xB000, 8, 5)
	access(r, 20, false, 0xB000) // another domain's read: no trap
	access(r, 20, true, 0xB000)  // its store: invalidation
	if tr := r.Tracker; tr.Invalidations != 1 || tr.Reuses != 1 {
		t.Errorf("invalidations %d reuses %d", tr.Invalidations, tr.Reuses)
	}
}

func TestParseAccess(t *testing.T) {
	for _, c := range []struct {
		line, err string
	}{
		{"7 W 0xdead 4", ""},
		{"7 X 0xdead 4", "want R or W"},
		{"7 W dead 4", "want hex with 0x"},
		{"x W 0xdead 4", "not a thread id"},
		{"7 W 0xdead 0", "want 1 to 64 bytes"},
		{"7 W 0xdead", "got 3 fields"},
	} {
		a, err := ParseAccess(c.line)
		if c.err == "" {
			if err != nil || a != (Access{TID: 7, Write: true, Addr: 0xdead, Size: 4}) {
				t.Errorf("%q: %+v %v", c.line, a, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v, want %q", c.line, err, c.err)
		}
	}
}

// RIBench's cases against their analytic histograms (the generated
// trace's own reuse pairs), as the thesis measures ReuseTracker (§6.5):
// S ≥ 0.90 in every case and ≥ 0.95 on average, with and without
// invalidations, for 1, 2, 8 and 32 threads; the invalidations, scaled by
// the sampling, within 10% of the trace's invalidated pairs.
func TestAccuracyOnRIBench(t *testing.T) {
	var sum float64
	var n int
	for _, inval := range []float64{0, 0.3} {
		for _, threads := range []int{1, 2, 8, 32} {
			for _, c := range Cases {
				c.Invalidate, c.Outer = inval, 8
				r := NewReplay(ReplayOptions{Options: Options{Seed: 3}, Period: 64, Unsampled: Remote})
				truth := c.Generate(threads, 11, r.Access)
				tr := r.Tracker
				s := Accuracy(truth.Fractions(), tr.Histogram())
				scale := float64(truth.Accesses) / float64(tr.Samples)
				inv := tr.EstimatedInvalidations * scale
				t.Logf("%-17s threads %2d inval %.1f: S %.3f (raw %.3f; samples %d, dropped %d, reuses %d, invalidations %d: estimated %.0f, trace %d)",
					c.Name, threads, inval, s, Accuracy(truth.Fractions(), tr.Raw()), tr.Samples, tr.Dropped, tr.Reuses, tr.Invalidations, inv, truth.Invalidated)
				if s < 0.90 {
					t.Errorf("%s, %d threads, invalidations %.1f: S %.3f < 0.90", c.Name, threads, inval, s)
				}
				if d := inv - float64(truth.Invalidated); d > 0.1*float64(truth.Invalidated) || -d > 0.1*float64(truth.Invalidated) {
					t.Errorf("%s, %d threads: %.0f invalidations estimated, the trace has %d", c.Name, threads, inv, truth.Invalidated)
				}
				sum += s
				n++
			}
		}
	}
	t.Logf("mean S %.3f", sum/float64(n))
	if sum/float64(n) < 0.95 {
		t.Errorf("mean S %.3f < 0.95", sum/float64(n))
	}
}

// Any line parses or is refused with an error, never a panic.
func FuzzParseAccess(f *testing.F) {
	for _, s := range []string{"7 W 0xdead 4", "1 R 0x0 64", "x", "1 R 0xffffffffffffffff 8", "4294967296 R 0x1 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if a, err := ParseAccess(line); err == nil && (a.Size == 0 || a.Size > 64) {
			t.Fatalf("%q parsed to size %d", line, a.Size)
		}
	})
}

// The harness's speed on RIBench's increasing case, 8 threads.
func BenchmarkReplay(b *testing.B) {
	c := Cases[0]
	c.Outer = 1
	var trace []Access
	c.Generate(8, 1, func(a Access) { trace = append(trace, a) })
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := NewReplay(ReplayOptions{Options: Options{Seed: 1}, Period: 64})
		for i := range trace {
			r.Access(trace[i])
		}
	}
	b.ReportMetric(float64(len(trace))*float64(b.N)/b.Elapsed().Seconds()/1e6, "M-accesses/s")
}

// A trap naming another address than its slot's (an earlier arm's, read
// late) is stale: neither a reuse nor an invalidation.
func TestStaleTrap(t *testing.T) {
	tr := New(nopRegs{}, Options{Slots: 1})
	tr.Sample(1, 0x1000, 8, 10)
	tr.TrappedOn(2, 0, 20, 20, 0x2000) // the slot's previous address
	if tr.Stale != 1 || tr.Reuses != 0 || tr.Invalidations != 0 || tr.Slots() != 1 {
		t.Fatalf("stale trap: %+v", tr)
	}
	tr.TrappedOn(1, 0, 5, 5, 0x1000) // before the sample: an earlier arm's
	if tr.Stale != 2 || tr.Slots() != 1 {
		t.Fatalf("a trap from before the sample: %+v", tr)
	}
	tr.TrappedOn(1, 0, 30, 30, 0x1000)
	if tr.Reuses != 1 || tr.Distance[bits.Len64(20)-1] != 1 {
		t.Errorf("the slot's own trap: reuses %d", tr.Reuses)
	}
	// Shared mode never arms the sampling thread: its trap is stale.
	sh := New(nopRegs{}, Options{Slots: 1, Mode: Shared})
	sh.Sample(1, 0x1000, 8, 10)
	sh.TrappedOn(1, 0, 20, 20, 0x1000)
	if sh.Stale != 1 || sh.Invalidations != 0 || sh.Reuses != 0 {
		t.Errorf("the owner's trap in shared mode: %+v", sh)
	}
}

// On each thread's own clock (its CPU time), clocks of two threads do not
// compare: whether a trap came after its slot's sample is told by the
// shared time. Thread 2 has run less than thread 1, yet its store after
// thread 1's sample invalidates it; thread 1's reuse is measured on its
// own clock; a trap from before the sample is stale whatever its clock.
func TestThreadClocks(t *testing.T) {
	tr := New(nopRegs{}, Options{Slots: 1})
	tr.SampleAt(1, 0x1000, 8, 5000, 100) // thread 1 has run 5000 ns
	tr.TrappedOn(2, 0, 40, 90, 0x1000)   // thread 2's store, before the sample
	if tr.Stale != 1 || tr.Slots() != 1 {
		t.Fatalf("a trap from before the sample: %+v", tr)
	}
	tr.TrappedOn(2, 0, 50, 120, 0x1000) // after it, thread 2 having run 50 ns
	if tr.Invalidations != 1 || tr.Stale != 1 {
		t.Fatalf("another thread's store after the sample: %+v", tr)
	}
	tr.SampleAt(1, 0x1000, 8, 6000, 200)
	tr.TrappedOn(1, 0, 6300, 900, 0x1000) // 300 ns of its CPU time later, 700 ns of time
	if tr.Reuses != 1 || tr.Distance[bits.Len64(300)-1] != 1 {
		t.Errorf("reuse on the thread's clock: %+v", tr.Raw())
	}
}

type nopRegs struct{}

func (nopRegs) Threads() []uint32                    { return []uint32{1, 2} }
func (nopRegs) Arm(uint32, int, uint64, uint8, Trap) {}
func (nopRegs) Disarm(uint32, int)                   {}
