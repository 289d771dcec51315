package comdetect

import (
	"fmt"
	"testing"
)

// ComDetective with watchpoints on the trace harness, against the
// benchmarks' ground truth: the False-Sharing fraction within ±0.03 of f,
// Point-to-Point ≥ 95% of the volume in the right pairs, and more
// detections per sample than sampling alone (the ratio is logged). Eight
// threads, as the thesis runs it: with two in strict turn, a line's
// transfers are not proportional to its accesses (f = 0.25: 19% of the
// transfers are false sharing), and the detector counts transfers.
func TestWatchpointsOnGroundTruth(t *testing.T) {
	const period, iters = 97, 100000
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		var withWP, alone Cell
		var samples [2]uint64
		for k, wp := range []bool{true, false} {
			r := NewReplay(ReplayOptions{Options: Options{Window: PreciseWindow}, Period: period, Watchpoints: wp, Seed: 7})
			FalseSharing(8, iters/4, f, 3, r.Access)
			m := r.Process()
			if wp {
				withWP = m.Totals
			} else {
				alone = m.Totals
			}
			samples[k] = r.Samples
		}
		got := float64(withWP.False) / float64(withWP.All)
		t.Logf("f=%.2f: false-sharing fraction %.3f with watchpoints (%d detections, %d samples), %.3f by samples alone (%d detections): %.2f× the detections per sample",
			f, got, withWP.Detections, samples[0], float64(alone.False)/float64(max(alone.All, 1)), alone.Detections,
			float64(withWP.Detections)/float64(samples[0])/(float64(alone.Detections)/float64(samples[1])))
		if got < f-0.03 || got > f+0.03 {
			t.Errorf("f=%.2f: false-sharing fraction %.3f with watchpoints", f, got)
		}
		if withWP.Detections*samples[1] <= alone.Detections*samples[0] {
			t.Errorf("f=%.2f: watchpoints give no more detections per sample (%d/%d vs %d/%d)", f, withWP.Detections, samples[0], alone.Detections, samples[1])
		}
	}
	r := NewReplay(ReplayOptions{Options: Options{Window: PreciseWindow}, Period: period, Watchpoints: true, Seed: 7})
	PointToPoint(iters, 0.5, 5, r.Access)
	m := r.Process()
	var total, pairs uint64
	for i := range m.All {
		for j := range m.All[i] {
			total += m.All[i][j]
			if fmt.Sprint(m.Threads[i], m.Threads[j]) == "1 2" || fmt.Sprint(m.Threads[i], m.Threads[j]) == "3 4" {
				pairs += 2 * m.All[i][j]
			}
		}
	}
	t.Logf("point-to-point: %d of %d in the pairs", pairs, total)
	if total == 0 || pairs*100 < total*95 {
		t.Errorf("point-to-point: %d of %d in the pairs (1,2) and (3,4)", pairs, total)
	}
}

type nopRegisters struct{}

func (nopRegisters) Threads(uint32) []uint32                          { return nil }
func (nopRegisters) Arm(pid, tid uint32, slot int, a uint64, s uint8) {}
func (nopRegisters) Disarm(pid, tid uint32, slot int)                 {}

// A process gone leaves nothing in the watcher: its publications and its
// threads' watched lines go, another process's stay (before Forget, every
// process ever watched kept up to 16 publications for good).
func TestWatcherForgetsProcesses(t *testing.T) {
	w := NewWatcher(New(Options{}), nopRegisters{}, 4, 1)
	for pid := uint32(1); pid <= 2; pid++ {
		w.Sampled(&Access{PID: pid, TID: pid * 10, Addr: 0x1000, Size: 8, Store: true, Time: 1, Period: 1}, false)
		w.Sampled(&Access{PID: pid, TID: pid*10 + 1, Addr: 0x1008, Size: 8, Time: 2, Period: 1}, true)
	}
	if len(w.recent) != 2 || len(w.watch) != 2 {
		t.Fatalf("before: %d processes with publications, %d threads watching; want 2 and 2", len(w.recent), len(w.watch))
	}
	w.Forget(1)
	if _, ok := w.recent[1]; ok || len(w.recent) != 1 {
		t.Errorf("publications kept for %d processes after forgetting pid 1: %v", len(w.recent), w.recent)
	}
	if _, ok := w.watch[watchKey{1, 11}]; ok || len(w.watch) != 1 {
		t.Errorf("watched lines after forgetting pid 1: %v", w.watch)
	}
}

// A thread that exited leaves the watcher: its publications are no longer
// armed on and its watched line goes; another thread's stay.
func TestWatcherForgetsThreads(t *testing.T) {
	w := NewWatcher(New(Options{}), nopRegisters{}, 4, 1)
	w.Sampled(&Access{PID: 1, TID: 10, Addr: 0x1000, Size: 8, Store: true, Time: 1, Period: 1}, false)
	w.Sampled(&Access{PID: 1, TID: 11, Addr: 0x2000, Size: 8, Store: true, Time: 2, Period: 1}, true) // arms on 10's line
	w.Sampled(&Access{PID: 1, TID: 12, Addr: 0x3000, Size: 8, Time: 3, Period: 1}, true)
	if len(w.recent[1]) != 2 || len(w.watch) != 2 {
		t.Fatalf("before: %d publications, %d threads watching; want 2 and 2", len(w.recent[1]), len(w.watch))
	}
	armed := w.watch[watchKey{1, 12}]
	w.ForgetThreads(1, []uint32{10, 11})
	if _, ok := w.recent[1]; ok {
		t.Errorf("publications of exited threads kept: %v", w.recent[1])
	}
	if _, ok := w.watch[watchKey{1, 12}]; !ok || len(w.watch) != 1 {
		t.Errorf("watched lines after 10 and 11 exited: %v; want only 12's", w.watch)
	}
	for range 20 { // nothing left to arm on
		w.Sampled(&Access{PID: 1, TID: 12, Addr: 0x3000, Size: 8, Time: 4, Period: 1}, true)
	}
	if wt := w.watch[watchKey{1, 12}]; wt != armed {
		t.Errorf("12 watches %+v, armed on %+v before: a sample armed on what exited threads published", wt, armed)
	}
}
