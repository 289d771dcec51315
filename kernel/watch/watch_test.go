package watch

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/codemap"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/internal/groundtruth/accesses"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/procmaps"
)

// worker is a locked OS thread that runs the jobs it is given.
type worker struct {
	tid  uint32
	jobs chan func()
	done chan struct{}
}

func startWorker(t testing.TB) *worker {
	w := &worker{jobs: make(chan func()), done: make(chan struct{})}
	ready := make(chan uint32)
	go func() {
		runtime.LockOSThread()
		p, _ := os.Readlink("/proc/thread-self")
		n, _ := strconv.Atoi(filepath.Base(p))
		ready <- uint32(n)
		for job := range w.jobs {
			job()
			w.done <- struct{}{}
		}
	}()
	w.tid = <-ready
	t.Cleanup(func() { close(w.jobs) })
	return w
}

func (w *worker) run(job func()) { w.jobs <- job; <-w.done }

// store and load make n plain 8-byte stores or loads of *p, each one
// access in every build (accesses.StoreLoop, LoadLoop), and one trap on
// arm64 too (perf.SignalsHeld).
func store(p *uint64, n int) { held(func() { accesses.StoreLoop(p, n) }) }

func load(p *uint64, n int) (v uint64) {
	held(func() { v = accesses.LoadLoop(p, n) })
	return v
}

// requireTraps gates a test on watchpoints that fire here: as root, on
// a host where the exporter's probe and perf's mem: event both see a
// write watchpoint count (internal/hostgate); on a guest the debug
// registers do not reach, the test is skipped with their proof.
func requireTraps(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
}

func held(fn func()) {
	if err := perf.SignalsHeld(fn); err != nil {
		panic(err)
	}
}

// A watchpoint armed from outside a thread traps once, at the thread's
// first access to the watched bytes (stores only, or loads too), however
// many follow; its trap's access, decoded with its registers from the
// instruction before its IP (x86) or at it (arm64), is the watched
// variable's; its time is CLOCK_MONOTONIC's and its distance clock the
// thread's CPU time. Re-armed after its trap, before the reader has seen
// it (the engine reads the slot's count), it traps once more; re-armed
// before its trap, it moves (MODIFY_ATTRIBUTES) and traps once where it
// now points; disarmed and armed again, it still traps once. Armed with
// no limit (armContinuous, which TrapCost measures by), it traps on each
// access, counted exactly against the accesses the thread made.
func TestEngineTrapsOncePerArm(t *testing.T) {
	requireTraps(t)
	slots, err := Slots(16)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOARCH == "amd64" && slots != 4 {
		t.Errorf("%d watchpoints per thread on x86-64, which has 4 debug registers", slots)
	}
	testenv.Require(t, slots >= 4, fmt.Sprintf("%d watchpoints per thread: the test uses 4", slots))
	w := startWorker(t)
	e, err := New(slots, 256) // 1 MiB: hundreds of traps with their registers
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Add(w.tid); err != nil {
		t.Fatal(err)
	}
	res := resolver(t)
	vars := make([]uint64, 16) // distinct 8-byte slots
	a, b := &vars[0], &vars[8]
	type trap struct {
		slot int
		addr uint64
		kind memop.Kind
	}
	var trapTimes, clocks []uint64
	traps := func() map[trap]int {
		got := map[trap]int{}
		trapTimes, clocks = trapTimes[:0], clocks[:0]
		_, lost := e.Read(func(tr memop.Trap) {
			if tr.TID != w.tid {
				t.Errorf("trap of thread %d, watching %d", tr.TID, w.tid)
			}
			acc, r := res.Trap(tr.PID, tr.IP, tr.Regs)
			if r != memop.Resolved || acc.Width != 8 {
				t.Errorf("trap at %#x decodes to %+v (%v)", tr.IP, acc, r)
			}
			got[trap{tr.Slot, acc.Addr, acc.Kind}]++
			clocks = append(clocks, tr.Clock)
			trapTimes = append(trapTimes, tr.Time)
		})
		if lost > 0 {
			t.Errorf("%d traps lost", lost)
		}
		return got
	}
	arm := func(slot int, p *uint64, writesOnly bool) {
		t.Helper()
		if err := e.Arm(w.tid, slot, addr(p), 8, writesOnly); err != nil {
			t.Fatal(err)
		}
		e.Flush()
	}
	want := func(what string, got map[trap]int, want ...trap) {
		t.Helper()
		exp := map[trap]int{}
		for _, tr := range want {
			exp[tr]++
		}
		if !maps.Equal(got, exp) {
			t.Errorf("%s: traps %v, want %v", what, got, exp)
		}
	}
	st, ld := memop.Store, memop.Load
	before, _ := e.Clock(w.tid)
	arm(0, a, true)
	m0 := monotonic(t)
	w.run(func() { store(a, 300); load(a, 700); store(b, 300) })
	m1 := monotonic(t)
	after, _ := e.Clock(w.tid)
	// Re-armed after its trap, unread: on b, loads too.
	arm(0, b, false)
	w.run(func() { store(a, 100); load(b, 250); store(b, 50) })
	want("a store watchpoint on a, then on b for loads and stores", traps(), trap{0, addr(a), st}, trap{0, addr(b), ld})
	if len(trapTimes) == 2 && (trapTimes[0] < m0 || trapTimes[0] > m1) {
		t.Errorf("trap at %d ns, the stores ran from %d to %d ns on CLOCK_MONOTONIC", trapTimes[0], m0, m1)
	}
	if len(clocks) == 2 && (clocks[0] < before || clocks[0] > after || clocks[1] < clocks[0]) {
		t.Errorf("traps at CPU times %v, the first outside %d..%d", clocks, before, after)
	}
	// Re-armed before its trap: it moves.
	arm(2, a, true)
	arm(2, b, false)
	w.run(func() { store(a, 40); load(b, 5); store(a, 40) })
	want("slot 2 moved from a to b before a trap", traps(), trap{2, addr(b), ld})
	// Disarmed before its trap, armed again: still one trap.
	arm(1, a, true)
	e.Disarm(w.tid, 1)
	e.Flush()
	w.run(func() { store(a, 100) })
	want("disarmed", traps())
	arm(1, a, true)
	w.run(func() { store(a, 100) })
	want("armed again after a disarm", traps(), trap{1, addr(a), st})
	// No limit: every access, exactly; then a one-shot on the same slot.
	if err := e.armContinuous(w.tid, 3, addr(a), 8, true); err != nil {
		t.Fatal(err)
	}
	e.Flush()
	w.run(func() { store(a, 300); load(a, 100); store(b, 300) })
	if got := traps(); got[trap{3, addr(a), st}] != 300 || len(got) != 1 {
		t.Errorf("a store watchpoint on a with no limit: traps %v, want the 300 stores to a", got)
	}
	arm(3, b, false)
	w.run(func() { store(b, 100); store(a, 100) })
	want("a one-shot after no limit", traps(), trap{3, addr(b), st})
	for slot := range 4 {
		e.Disarm(w.tid, slot)
	}
	e.Flush()
	w.run(func() { store(b, 100); store(a, 100) })
	want("all disarmed", traps())
}

func addr(p *uint64) uint64 { return uint64(uintptr(unsafe.Pointer(p))) }

// The costs behind the governor: arming a watchpoint from outside (moved
// before its trap: MODIFY_ATTRIBUTES between two reads of its count; or
// after its trap: opened again), and a trap, as the extra time of a
// watched store over an unwatched one: with no limit every store traps;
// armed for one trap, the 99 stores after the first must cost nothing
// (after a one-shot's trap the kernel leaves the event in a state where
// an enable installs it trapping unseen: "re-armed" would show it).
func BenchmarkArm(b *testing.B) {
	requireTraps(b)
	w := startWorker(b)
	e, err := New(1, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if err := e.Add(w.tid); err != nil {
		b.Fatal(err)
	}
	var v [16]uint64
	b.Run("moved", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			e.Arm(w.tid, 0, addr(&v[8*(i%2)]), 8, true)
			e.Flush()
		}
	})
	// Each with a round trip to the thread, a store: to a variable not
	// watched, or to the watched one (a trap, then the arm opens the
	// watchpoint again).
	for _, trapped := range []bool{false, true} {
		b.Run(map[bool]string{false: "store-then-moved", true: "trap-then-reopened"}[trapped], func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				to := &v[8*(i%2)]
				if trapped {
					to = &v[0]
					w.run(func() { store(to, 1) })
				} else {
					w.run(func() { store(&v[15], 1) })
				}
				e.Arm(w.tid, 0, addr(to), 8, true)
				e.Flush()
				e.Read(func(memop.Trap) {})
			}
		})
	}
}

func BenchmarkTrap(b *testing.B) {
	requireTraps(b)
	for _, arm := range []string{"unwatched", "every-store", "one-shot", "re-armed"} {
		b.Run(arm, func(b *testing.B) {
			w := startWorker(b)
			e, err := New(1, 256)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if err := e.Add(w.tid); err != nil {
				b.Fatal(err)
			}
			var v uint64
			switch arm {
			case "every-store":
				e.armContinuous(w.tid, 0, addr(&v), 8, true)
			case "one-shot", "re-armed":
				e.Arm(w.tid, 0, addr(&v), 8, true)
			}
			e.Flush()
			b.ResetTimer()
			for b.Loop() {
				w.run(func() { store(&v, 100) })
				b.StopTimer()
				e.Read(func(memop.Trap) {})
				if arm == "re-armed" {
					e.Arm(w.tid, 0, addr(&v), 8, true)
					e.Flush()
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/store")
		})
	}
}

// resolver decodes this process's code.
func resolver(t *testing.T) *memop.Resolver {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	maps := addrmap.New()
	m, err := procmaps.Read(fs, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	maps.Set(uint32(os.Getpid()), m)
	code := codemap.New(maps, func(_ uint32, name string) (codemap.File, string, error) {
		f, err := os.Open(name)
		return f, name, err
	}, nil)
	t.Cleanup(func() { code.Close() })
	r, err := memop.NewResolver(code, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

//go:noinline
func walkArray(a []uint64) {
	for i := range a {
		a[i]++
	}
}

// A watchpoint armed in a thread that is running (on another CPU) traps
// from the next access on: a thread walking an array reuses each slot once
// a walk, so each re-arm must trap once, by the end of the first walk
// that began after the arm's Flush, on the walker's own CLOCK_MONOTONIC
// timeline (before the engine rescheduled the group, 5 to 7 of about 50
// walks trapped, with walks 16 times as long: an arm took effect only
// milliseconds later).
func TestArmTakesEffectAtOnce(t *testing.T) {
	requireTraps(t)
	w := startWorker(t)
	e, err := New(1, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Add(w.tid); err != nil {
		t.Fatal(err)
	}
	// 512 KiB: a walk of tens of µs here, and still several a window
	// where the CPU is emulated (QEMU's arm64, scripts/arm64-vm).
	a := make([]uint64, 1<<16)
	var stop atomic.Bool
	starts := make([]atomic.Uint64, 1<<20) // when each walk began
	var walks atomic.Int64
	done := make(chan struct{})
	go w.run(func() {
		var ts unix.Timespec
		for k := 0; !stop.Load() && k < len(starts); k++ {
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			starts[k].Store(uint64(ts.Nano()))
			walks.Store(int64(k + 1))
			walkArray(a)
		}
		close(done)
	})
	time.Sleep(50 * time.Millisecond)
	checked := 0
	for k := range 6 {
		if err := e.Arm(w.tid, 0, addr(&a[1000+k]), 8, false); err != nil {
			t.Fatal(err)
		}
		e.Flush()
		armed := monotonic(t)
		time.Sleep(20 * time.Millisecond)
		e.Disarm(w.tid, 0)
		e.Flush()
		var times []uint64
		e.Read(func(tr memop.Trap) { times = append(times, tr.Time) })
		// The second walk to begin after the arm: the first, begun after
		// it, must have trapped before it began.
		var second uint64
		for i, n := 0, 0; i < int(walks.Load()); i++ {
			if s := starts[i].Load(); s > armed {
				if n++; n == 2 {
					second = s
					break
				}
			}
		}
		if second == 0 {
			t.Logf("window %d: fewer than two walks began in it", k)
			continue
		}
		checked++
		if len(times) != 1 || times[0] > second {
			t.Errorf("window %d: traps at %v, armed at %d ns: want one, before the second walk begun after it (at %d ns)", k, times, armed, second)
		}
	}
	stop.Store(true)
	<-done
	if checked < 3 {
		t.Errorf("only %d of 6 windows of 20 ms saw two walks begin", checked)
	}
}

// A trap costs the trapping thread something: more than nothing, less
// than a millisecond (it is tens of microseconds in this project's VMs).
func TestTrapCost(t *testing.T) {
	requireTraps(t)
	c, err := TrapCost(2000)
	if err != nil {
		t.Fatal(err)
	}
	if c <= 0 || c > time.Millisecond {
		t.Errorf("a trap costs %v", c)
	}
	t.Logf("a trap costs %v", c)
}

// monotonic is CLOCK_MONOTONIC now, ns.
func monotonic(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// spinCPU runs the calling thread in user mode until it has used d more
// CPU time, looking at its clock every ~100 µs.
func spinCPU(t *testing.T, d time.Duration) {
	var v uint64
	start := threadCPU(t)
	for threadCPU(t)-start < d {
		load(&v, 100_000)
	}
}

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPU(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Error(err)
	}
	return time.Duration(ts.Nano())
}

// With SampleEvery the leader samples its thread every period of the
// thread's CPU time: a thread that runs 30 ms, sleeps 60 ms and runs 30 ms
// more is sampled about once a millisecond of its running, each sample
// carrying its task-clock, which advances by a period or a few from one
// sample to the next however long the thread slept between them; its
// CLOCK_MONOTONIC time shows the sleep. The samples carry the user
// registers (the sampled access is decoded from them) and read a changed
// period.
func TestLeaderSamplesOnThreadCPUTime(t *testing.T) {
	testenv.RequireRoot(t)
	const period = uint64(time.Millisecond)
	w := startWorker(t)
	e := samplingEngine(t, period)
	if err := e.Add(w.tid); err != nil {
		t.Fatal(err)
	}
	before, _ := e.Clock(w.tid)
	steal0 := testenv.Stolen(t)
	w.run(func() {
		spinCPU(t, 30*time.Millisecond)
		time.Sleep(60 * time.Millisecond)
		spinCPU(t, 30*time.Millisecond)
	})
	after, _ := e.Clock(w.tid)
	steal := uint64(testenv.StolenSince(t, steal0))
	type sample struct{ clock, time uint64 }
	var got []sample
	_, lost := e.ReadSampled(func(memop.Trap) { t.Error("a trap, with nothing armed") }, func(s memop.Sampled) {
		if s.Sample.TID != w.tid || s.Sample.RegsABI == 0 || s.Sample.IP >= 0xffff800000000000 {
			t.Errorf("sample of thread %d at %#x (registers: ABI %d), sampling thread %d in user mode", s.Sample.TID, s.Sample.IP, s.Sample.RegsABI, w.tid)
		}
		got = append(got, sample{s.Clock, s.Sample.Time})
	})
	if lost > 0 {
		t.Errorf("%d records lost", lost)
	}
	ran := after - before
	t.Logf("%d samples over %.1f ms of the thread's CPU time, %.0f ms stolen from this VM's CPUs meanwhile", len(got), float64(ran)/1e6, float64(steal)/1e6)
	if n := float64(len(got)); n < 0.7*float64(max(ran, steal)-steal)/float64(period) || n > 1.3*float64(ran/period)+1 {
		t.Fatalf("%d samples for %d ms of CPU time, sampling every %d ms", len(got), ran/period, period/uint64(time.Millisecond))
	}
	slept := false
	for i, s := range got {
		if s.clock < before || s.clock > after {
			t.Errorf("sample %d at CPU time %d, outside %d..%d", i, s.clock, before, after)
		}
		if i == 0 {
			continue
		}
		dc, dt := s.clock-got[i-1].clock, s.time-got[i-1].time
		// A tick that finds the thread in the kernel (a syscall, being
		// switched) is not sampled, nor one while the hypervisor ran
		// another guest on the CPU (the guest's clock ran on: steal): a
		// few periods between two samples and what was stolen, never
		// the sleep's sixty.
		if s.clock <= got[i-1].clock || dc > 5*period+steal {
			t.Errorf("samples %d and %d are %d ns of CPU time apart, sampling every %d", i-1, i, int64(dc), period)
		}
		slept = slept || dt >= uint64(50*time.Millisecond)
	}
	if !slept {
		t.Errorf("no two samples 50 ms apart on CLOCK_MONOTONIC across the thread's 60 ms sleep")
	}
	// A new period holds from the next sample on.
	if err := e.SampleEvery(4 * period); err != nil {
		t.Fatal(err)
	}
	before, _ = e.Clock(w.tid)
	steal0 = testenv.Stolen(t)
	w.run(func() { spinCPU(t, 40*time.Millisecond) })
	after, _ = e.Clock(w.tid)
	steal = uint64(testenv.StolenSince(t, steal0))
	n := 0
	e.ReadSampled(func(memop.Trap) {}, func(memop.Sampled) { n++ })
	if want := float64(after-before) / float64(4*period); float64(n) < 0.7*(want-float64(steal)/float64(4*period)) || float64(n) > 1.3*want+1 {
		t.Errorf("%d samples in %.1f ms of CPU time at a period of 4 ms, %.0f ms stolen", n, float64(after-before)/1e6, float64(steal)/1e6)
	}
}

// One engine holds threads whose leaders sample (Add, after SampleEvery)
// beside threads whose leaders only count (AddCounting): both run the same
// CPU time, only the first is sampled, both trap once on their watched
// variable, and a new period reaches the sampling leaders only.
func TestAddCountingBesideSampling(t *testing.T) {
	requireTraps(t)
	const period = uint64(time.Millisecond)
	sampled, counting := startWorker(t), startWorker(t)
	e := samplingEngine(t, period)
	if err := e.AddCounting(counting.tid); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(sampled.tid); err != nil {
		t.Fatal(err)
	}
	vars := make([]uint64, 16)
	for i, w := range []*worker{sampled, counting} {
		if err := e.Arm(w.tid, 0, addr(&vars[8*i]), 8, true); err != nil {
			t.Fatal(err)
		}
	}
	e.Flush()
	for i, w := range []*worker{sampled, counting} {
		w.run(func() {
			spinCPU(t, 20*time.Millisecond)
			store(&vars[8*i], 100+100*i)
		})
	}
	// A new period: the counting leader must stay counting (setting a
	// period on it would make it sample).
	if err := e.SampleEvery(2 * period); err != nil {
		t.Fatal(err)
	}
	counting.run(func() { spinCPU(t, 20*time.Millisecond) })
	samples, traps := map[uint32]int{}, map[uint32]int{}
	_, lost := e.ReadSampled(func(tr memop.Trap) { traps[tr.TID]++ }, func(s memop.Sampled) { samples[s.Sample.TID]++ })
	if lost > 0 {
		t.Errorf("%d records lost", lost)
	}
	if samples[counting.tid] != 0 || samples[sampled.tid] < 5 {
		t.Errorf("samples by thread %v: want none of the counting thread %d and about 20 of the sampled %d", samples, counting.tid, sampled.tid)
	}
	if traps[sampled.tid] != 1 || traps[counting.tid] != 1 {
		t.Errorf("traps by thread %v: want one (an arm's) of each, %d and %d", traps, sampled.tid, counting.tid)
	}
}

// samplingEngine is an engine of one watchpoint per thread whose leaders
// sample every period ns of their thread's CPU time, closed at cleanup.
func samplingEngine(t *testing.T, period uint64) *Engine {
	e, err := New(1, 256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.SampleEvery(period); err != nil {
		t.Fatal(err)
	}
	return e
}
