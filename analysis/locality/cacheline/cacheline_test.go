package cacheline

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
)

// sampler models precise sampling of a program's accesses: every access
// has a 1/period chance to become a sample that stands for period events,
// as a randomised sampling period makes it.
type sampler struct {
	r      *rand.Rand
	period uint64
	t      *Table
	kinds  [3]uint64 // samples by kind
}

func (s *sampler) access(a memaccess.Access) {
	if s.r.Uint64N(s.period) != 0 {
		return
	}
	a.Period = s.period
	s.kinds[s.t.Add(a)]++
}

// falseSharingBench is the thesis' False-Sharing microbenchmark (Listing
// 5.2): threads interleave atomic adds (a load and a store) on their own
// 8-byte slot of falseSharingData with probability f, otherwise on the one
// trueSharingData, which lies on another line. pad puts every slot on its
// own line.
func falseSharingBench(t *testing.T, threads int, f float64, pad bool, iters int) *sampler {
	const fsBase, tsAddr = 0x10000, 0x20000
	s := &sampler{r: rand.New(rand.NewPCG(uint64(threads), math.Float64bits(f))), period: 50, t: New(64)}
	for range iters {
		tid := uint32(s.r.IntN(threads))
		addr := uint64(tsAddr)
		if s.r.Float64() < f {
			stride := uint64(8)
			if pad {
				stride = LineSize
			}
			addr = fsBase + stride*uint64(tid)
		}
		for _, store := range []bool{false, true} {
			s.access(memaccess.Access{Addr: addr, Size: 8, PID: 1, TID: 100 + tid, CPU: tid, Store: store})
		}
	}
	return s
}

// FS/(FS+TS) comes out at the configured fraction, within sampling error,
// and linear in it.
func TestFalseSharingFraction(t *testing.T) {
	for _, f := range []float64{0, 0.2, 0.5, 0.8, 1} {
		s := falseSharingBench(t, 8, f, false, 200000)
		fs, ts := float64(s.t.Totals.Events[FalseSharing]), float64(s.t.Totals.Events[TrueSharing])
		got := fs / (fs + ts)
		n := float64(s.kinds[FalseSharing] + s.kinds[TrueSharing])
		// Three binomial standard errors, and the first touch of each slot.
		tol := 3*math.Sqrt(f*(1-f)/n) + 16/n
		if math.Abs(got-f) > tol {
			t.Errorf("f=%.1f: classified FS/(FS+TS) = %.4f over %.0f samples, want within %.4f", f, got, n, tol)
		}
		if s.kinds[FalseSharing]*s.period != s.t.Totals.Events[FalseSharing] {
			t.Errorf("estimated events are not samples × period")
		}
	}
}

// Padded slots are never falsely shared.
func TestPaddedHasNoFalseSharing(t *testing.T) {
	s := falseSharingBench(t, 8, 0.5, true, 100000)
	if s.t.Totals.Events[FalseSharing] != 0 {
		t.Errorf("%d false-sharing events on padded data", s.t.Totals.Events[FalseSharing])
	}
	if s.t.Totals.Events[TrueSharing] == 0 {
		t.Error("the shared variable's true sharing went undetected")
	}
}

// The thesis' Point-to-Point benchmark (Listing 5.4): threads 0 and 1
// write their pair's element (on its own line) with probability 0.8, 2 and
// 3 theirs with 0.2, else a private one each: only the two pairs
// communicate, in proportion to their fractions.
func TestPointToPoint(t *testing.T) {
	s := &sampler{r: rand.New(rand.NewPCG(7, 7)), period: 20, t: New(64)}
	frac := []float64{0.8, 0.8, 0.2, 0.2}
	for range 400000 {
		tid := s.r.IntN(4)
		addr := uint64(0x9000 + LineSize*uint64(tid)) // private, own line
		if s.r.Float64() < frac[tid] {
			addr = 0x1000 + LineSize*uint64(tid/2) // the pair's shared element
		}
		s.access(memaccess.Access{Addr: addr, Size: 4, PID: 1, TID: uint32(tid), Store: true})
	}
	pairs := map[Pair]uint64{}
	for _, l := range s.t.Top(100) {
		for p, n := range l.Pairs() {
			pairs[p] += n
		}
	}
	if len(pairs) != 2 || pairs[Pair{0, 1}] == 0 || pairs[Pair{2, 3}] == 0 {
		t.Fatalf("pairs %v, want only {0,1} and {2,3}", pairs)
	}
	// Once both threads of a pair have written their element, each of their
	// accesses to it is contended: the magnitudes follow the fractions,
	// 0.8/0.2 = 4, within sampling error (about 2000 samples for the
	// smaller pair).
	ratio := float64(pairs[Pair{0, 1}]) / float64(pairs[Pair{2, 3}])
	if ratio < 3.5 || ratio > 4.5 {
		t.Errorf("pair (0,1) / pair (2,3) = %.2f, want 4 ± 0.5", ratio)
	}
}

// Hand-worked line: reads that overlap no write are not sharing; a write
// next to another thread's bytes is false sharing; touching bytes another
// thread wrote is true sharing. The byte maps and ranking follow.
func TestClassifyByHand(t *testing.T) {
	tb := New(8)
	steps := []struct {
		a    memaccess.Access
		want Kind
	}{
		{memaccess.Access{Addr: 0x1000, Size: 8, PID: 1, TID: 1, Period: 1}, NotShared},                                      // T1 reads [0,8)
		{memaccess.Access{Addr: 0x1000, Size: 8, PID: 1, TID: 2, Period: 1}, NotShared},                                      // T2 reads the same: read sharing only
		{memaccess.Access{Addr: 0x1008, Size: 8, PID: 1, TID: 2, Store: true, Period: 1}, FalseSharing},                      // T2 writes [8,16), T1 read [0,8)
		{memaccess.Access{Addr: 0x100c, Size: 4, PID: 1, TID: 1, Period: 1, Contention: datasrc.ContLocalHITM}, TrueSharing}, // T1 reads bytes T2 wrote
		{memaccess.Access{Addr: 0x1030, Size: 2, PID: 1, TID: 3, Period: 1}, FalseSharing},                                   // T3 reads [48,50), T2 wrote elsewhere
		{memaccess.Access{Addr: 0x1030, Size: 2, PID: 2, TID: 9, Store: true, Period: 1}, NotShared},                         // another process: another line
		{memaccess.Access{Addr: 0, PID: 1, TID: 1, Period: 1}, NotShared},                                                    // no data address
	}
	for i, s := range steps {
		if got := tb.Add(s.a); got != s.want {
			t.Errorf("step %d: %v, want %v", i, got, s.want)
		}
	}
	top := tb.Top(10)
	if len(top) != 2 || top[0].Addr != 0x1000 || top[0].PID != 1 || top[0].LocalHITM != 1 {
		t.Fatalf("top %+v", top)
	}
	l := top[0]
	if th := l.Threads(); th[0].Read != 0xff|0xf000 || th[1].Read != 0xff || th[1].Written != 0xff00 || th[2].Read != 3<<48 {
		t.Errorf("byte maps %+v", l.Threads())
	}
	if l.Pairs()[Pair{1, 2}] != 2 || l.Pairs()[Pair{2, 3}] != 1 || tb.Totals.NoAddr != 1 || tb.Totals.Stores != 2 {
		t.Errorf("pairs %v totals %+v", l.Pairs(), tb.Totals)
	}
}

// The table keeps its bound by dropping its coldest lines; the totals keep
// every access.
func TestBound(t *testing.T) {
	tb := New(100)
	for i := range 1000 {
		var hitm datasrc.Contention
		if i%10 == 0 {
			hitm = datasrc.ContRemoteHITM
		}
		tb.Add(memaccess.Access{Addr: uint64(0x100000 + LineSize*i), PID: 1, TID: 1, Contention: hitm, Period: 1})
	}
	if tb.Len() > 100 || tb.Totals.Loads != 1000 || tb.Totals.Evicted == 0 {
		t.Errorf("%d lines, totals %+v", tb.Len(), tb.Totals)
	}
	// The HITM lines that came last outrank the plain ones.
	if top := tb.Top(1); top[0].RemoteHITM != 1 {
		t.Errorf("hottest line %+v", top[0])
	}
}

func TestReport(t *testing.T) {
	if got := Ranges(0xff0f | 1<<63); got != "0-3,8-15,63" {
		t.Errorf("Ranges: %q", got)
	}
	tb := New(8)
	tb.Add(memaccess.Access{Addr: 0x1000, Size: 8, PID: 1, TID: 1, CPU: 3, Period: 10, IP: 0x400100, Contention: datasrc.ContLocalHITM, Weight: 101})
	tb.Add(memaccess.Access{Addr: 0x1008, Size: 8, PID: 1, TID: 2, CPU: 5, Store: true, Period: 10, IP: 0x400200, Weight: 7})
	tb.Add(memaccess.Access{Addr: 0x1000, Size: 8, PID: 1, TID: 1, CPU: 3, Period: 10, IP: 0x400100, Weight: 40})
	tb.Add(memaccess.Access{Addr: 0x1000, Size: 8, PID: 1, TID: 1, CPU: 3, Period: 10, IP: 0x400100, Contention: datasrc.ContLocalHITM, Weight: 200})
	r := tb.Report(5, func(pid uint32, addr uint64) string { return "[heap]" })
	if p := r.Lines[0].Pairs; len(p) != 1 || p[0] != (PairReport{A: 1, B: 2, Events: 30}) {
		t.Errorf("pairs %+v", p)
	}
	// The load's latency by class: two local HITMs of 101 and 200 cycles,
	// another load of 40; a store's weight is not a load latency.
	if c := r.Lines[0].Code; len(c) != 2 || c[0].LoadCycles == nil || *c[0].LoadCycles != (LoadCycles{LocalHITM: 150.5, Other: 40}) ||
		c[1] != (CodeReport{IP: "0x400200", Symbol: "[heap]", Offset: 8, Op: "store", Samples: 1}) {
		t.Errorf("code %+v", c)
	} else if c[0].LoadCycles = nil; c[0] != (CodeReport{IP: "0x400100", Symbol: "[heap]", Offset: 0, Op: "load", Samples: 3, HITM: 2}) {
		t.Errorf("load code %+v", c[0])
	}
	if r.Totals.FalseSharing != 30 || len(r.Lines) != 1 || r.Lines[0].Address != "0x1000" || r.Lines[0].Symbol != "[heap]" ||
		r.Lines[0].Threads[1].Written != "8-15" || r.Lines[0].Threads[1].CPUs[0] != 5 || r.Lines[0].Threads[0].Read != "0-7" {
		t.Errorf("%+v", r)
	}
}

// With a window, another thread's bytes count only while its latest access
// to the line is recent; without one, for as long as the line is held.
func TestWindow(t *testing.T) {
	const s = uint64(time.Second)
	steps := []struct {
		a                   memaccess.Access
		windowed, unbounded Kind
	}{
		{memaccess.Access{Addr: 0x1000, Size: 8, TID: 1, Store: true, Time: 0}, NotShared, NotShared},
		{memaccess.Access{Addr: 0x1008, Size: 8, TID: 2, Store: true, Time: 2 * s}, NotShared, FalseSharing}, // T1's write is 2 s old
		{memaccess.Access{Addr: 0x1000, Size: 8, TID: 1, Time: 2*s + s/2}, FalseSharing, FalseSharing},       // T2 wrote beside it just now; with the window T1's own old write is forgotten
		{memaccess.Access{Addr: 0x1000, Size: 8, TID: 2, Time: 2*s + s/2 + 1}, NotShared, TrueSharing},       // T1 wrote [0,8) 2.5 s ago and only read it since
	}
	windowed, unbounded := New(8), New(8)
	windowed.SetWindow(time.Second)
	for i, st := range steps {
		st.a.Period = 1
		if got := windowed.Add(st.a); got != st.windowed {
			t.Errorf("step %d with a 1 s window: %v, want %v", i, got, st.windowed)
		}
		if got := unbounded.Add(st.a); got != st.unbounded {
			t.Errorf("step %d without a window: %v, want %v", i, got, st.unbounded)
		}
	}
}

// A line with one HITM, or one peer-snoop load on Arm, outranks one with
// none however many stores it has, in Top and when the table evicts (perf
// c2c's order; a packed score of hitm<<20+stores had 2^20+1 stores win).
func TestHITMOutranksStores(t *testing.T) {
	for _, c := range []datasrc.Contention{datasrc.ContRemoteHITM, datasrc.ContLocalHITM, datasrc.ContLocalPeer, datasrc.ContRemotePeer} {
		tb := New(4)
		const stores, hitm, plain = 1<<20 + 1, 0x2000, 0x1000
		for range stores {
			tb.Add(memaccess.Access{Addr: plain, Size: 8, PID: 1, TID: 1, Store: true, Period: 1})
		}
		tb.Add(memaccess.Access{Addr: hitm, Size: 8, PID: 1, TID: 2, Contention: c, Period: 1})
		if top := tb.Top(2); top[0].Addr != hitm || top[1].Addr != plain || top[0].Costly() != 1 {
			t.Errorf("%b: ranked %#x, %#x; want the contended line %#x first", c, top[0].Addr, top[1].Addr, uint64(hitm))
		}
		// Fill the table: the colder half goes, and the contended line stays.
		for i := range 3 {
			tb.Add(memaccess.Access{Addr: uint64(0x10000 + LineSize*i), Size: 8, PID: 1, TID: 1, Period: 1})
		}
		if tb.Totals.Evicted == 0 {
			t.Fatal("nothing evicted")
		}
		if top := tb.Top(1); top[0].Addr != hitm {
			t.Errorf("%b: after eviction the hottest line is %#x, want %#x", c, top[0].Addr, uint64(hitm))
		}
	}
}

// Ranked by one kind of contended load, only the lines with some are
// listed, most first; by any, every line, by HITM and peer loads together.
func TestTopByDisplay(t *testing.T) {
	tb := New(8)
	add := func(addr uint64, c datasrc.Contention, store bool) {
		tb.Add(memaccess.Access{Addr: addr, Size: 8, PID: 1, TID: 1, Contention: c, Store: store, Period: 1})
	}
	add(0x1000, datasrc.ContLocalHITM, false)
	add(0x2000, datasrc.ContRemoteHITM, false)
	add(0x2000, datasrc.ContRemoteHITM, false)
	add(0x3000, 0, true)
	add(0x4000, datasrc.ContLocalPeer, false)
	for name, want := range map[string][]uint64{"any": {0x2000, 0x1000, 0x4000, 0x3000}, "tot": {0x2000, 0x1000},
		"lcl": {0x1000}, "rmt": {0x2000}, "peer": {0x4000}} {
		d, err := ParseDisplay(name)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, l := range tb.TopBy(10, d) {
			got = append(got, l.Addr)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %#x, want %#x", name, got, want)
		}
	}
	if _, err := ParseDisplay("hitm"); err == nil {
		t.Error("display hitm taken")
	}
}

// Each access meets the thread that touched the line last among those that
// make it sharing, the one whose cache the line came from: four threads
// writing their own slots in turn pair each with the one before it, not
// everyone with the first thread on the line.
func TestPartnerIsTheLatestToucher(t *testing.T) {
	tb := New(8)
	for round := range 3 {
		for k := range 4 {
			tb.Add(memaccess.Access{Addr: 0x1000 + 8*uint64(k), Size: 8, PID: 1, TID: uint32(k + 1), Store: true, Period: 1, Time: uint64(10*round + k + 1)})
		}
	}
	want := map[Pair]uint64{{1, 2}: 3, {2, 3}: 3, {3, 4}: 3, {1, 4}: 2}
	if got := tb.Top(1)[0].Pairs(); !maps.Equal(got, want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
}
