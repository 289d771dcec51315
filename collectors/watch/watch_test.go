package watch

import (
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

	"github.com/pmu-exporter/pmu_exporter/collectors/perf"
	"github.com/pmu-exporter/pmu_exporter/collectors/procmaps"
	"github.com/pmu-exporter/pmu_exporter/comm/addrmap"
	"github.com/pmu-exporter/pmu_exporter/comm/codemap"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
	"github.com/pmu-exporter/pmu_exporter/internal/groundtruth/accesses"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
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

func held(fn func()) {
	if err := perf.SignalsHeld(fn); err != nil {
		panic(err)
	}
}

// Watchpoints armed from outside a thread trap on each of its accesses to
// the watched bytes while armed (stores only, or loads too), counted
// against the accesses it made; re-arming moves them (MODIFY_ATTRIBUTES);
// each trap's access, decoded with its registers from the instruction
// before its IP (x86) or at it (arm64), is the watched variable; the
// distance clock is the thread's CPU time.
func TestEngineTrapsExactly(t *testing.T) {
	testenv.RequireRoot(t)
	slots, err := Slots(16)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOARCH == "amd64" && slots != 4 {
		t.Errorf("%d watchpoints per thread on x86-64, which has 4 debug registers", slots)
	}
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
	// traps counts by slot and by decoded (address, kind).
	type access struct {
		addr uint64
		kind memop.Kind
	}
	var trapTimes []uint64
	traps := func() (map[int]int, map[access]int, []uint64) {
		slots, accs := map[int]int{}, map[access]int{}
		var clocks []uint64
		_, lost := e.Read(func(tr Trap) {
			if tr.TID != w.tid {
				t.Errorf("trap of thread %d, watching %d", tr.TID, w.tid)
			}
			acc, r := res.Trap(tr.PID, tr.IP, tr.Regs)
			if r != memop.Resolved || acc.Width != 8 {
				t.Errorf("trap at %#x decodes to %+v (%v)", tr.IP, acc, r)
			}
			slots[tr.Slot]++
			accs[access{acc.Addr, acc.Kind}]++
			clocks = append(clocks, tr.Clock)
			trapTimes = append(trapTimes, tr.Time)
		})
		if lost > 0 {
			t.Errorf("%d traps lost", lost)
		}
		return slots, accs, clocks
	}
	before, _ := e.Clock(w.tid)
	if err := e.Arm(w.tid, 0, addr(a), 8, true); err != nil {
		t.Fatal(err)
	}
	e.Flush()
	m0 := monotonic(t)
	w.run(func() { store(a, 300); load(a, 700); store(b, 300) })
	m1 := monotonic(t)
	after, _ := e.Clock(w.tid)
	st := memop.Store
	s, accs, clocks := traps()
	// The traps' times are CLOCK_MONOTONIC's, as the samples' are.
	for _, tm := range trapTimes {
		if tm < m0 || tm > m1 {
			t.Errorf("trap at %d ns, the stores ran from %d to %d ns on CLOCK_MONOTONIC", tm, m0, m1)
			break
		}
	}
	if s[0] != 300 || len(s) != 1 || accs[access{addr(a), st}] != 300 {
		t.Errorf("store watchpoint on a: slots %v, accesses %v; want the 300 stores to a", s, accs)
	}
	for i, c := range clocks {
		if c < before || c > after || i > 0 && c < clocks[i-1] {
			t.Errorf("trap %d at CPU time %d, outside %d..%d or before the previous", i, c, before, after)
			break
		}
	}
	// Loads too, on b, in slot 2; then re-armed while armed, on a.
	e.Disarm(w.tid, 0)
	e.Flush()
	if err := e.Arm(w.tid, 2, addr(b), 8, false); err != nil {
		t.Fatal(err)
	}
	e.Flush()
	w.run(func() { store(a, 100); load(b, 250); store(b, 50) })
	if s, accs, _ := traps(); s[2] != 300 || accs[access{addr(b), memop.Load}] != 250 || accs[access{addr(b), st}] != 50 {
		t.Errorf("read/write watchpoint on b: slots %v, accesses %v; want 250 loads and 50 stores of b", s, accs)
	}
	if err := e.Arm(w.tid, 2, addr(a), 8, true); err != nil {
		t.Fatal(err)
	}
	e.Flush()
	w.run(func() { store(b, 40); store(a, 40) })
	if s, _, _ := traps(); s[2] != 40 || len(s) != 1 {
		t.Errorf("re-armed on a: %v, want 40 traps on slot 2", s)
	}
	e.Disarm(w.tid, 2)
	e.Flush()
	w.run(func() { store(b, 100); store(a, 100) })
	if s, _, _ := traps(); len(s) != 0 {
		t.Errorf("disarmed: %v", s)
	}
}

func addr(p *uint64) uint64 { return uint64(uintptr(unsafe.Pointer(p))) }

// The costs behind the governor: re-arming a watchpoint from outside
// (MODIFY_ATTRIBUTES, and enable), and a trap, as the extra time of a
// watched store over an unwatched one.
func BenchmarkArm(b *testing.B) {
	w := startWorker(b)
	e, err := New(1, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if err := e.Add(w.tid); err != nil {
		b.Fatal(err)
	}
	var v [2]uint64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		e.Arm(w.tid, 0, addr(&v[i%2]), 8, true)
		e.Flush()
	}
}

func BenchmarkTrap(b *testing.B) {
	for _, watched := range []bool{false, true} {
		b.Run(map[bool]string{false: "unwatched", true: "watched"}[watched], func(b *testing.B) {
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
			if watched {
				e.Arm(w.tid, 0, addr(&v), 8, true)
				e.Flush()
			}
			b.ResetTimer()
			for b.Loop() {
				w.run(func() { store(&v, 100) })
				e.Read(func(Trap) {})
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
// a walk, so every walk that begins after a re-arm and ends before the
// disarm must trap, not a handful of them (before the engine rescheduled
// the group: 5 to 7 traps per window instead of about 50, with walks 16
// times as long).
func TestArmTakesEffectAtOnce(t *testing.T) {
	testenv.RequireRoot(t)
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
	var walked atomic.Int64 // walks finished
	done := make(chan struct{})
	go w.run(func() {
		for !stop.Load() {
			walkArray(a)
			walked.Add(1)
		}
		close(done)
	})
	time.Sleep(50 * time.Millisecond)
	// Walks begun after an arm took effect and finished before its disarm:
	// each must trap, however the machine's load spreads the walks in time.
	var traps, within int64
	for k := range 6 {
		if err := e.Arm(w.tid, 0, addr(&a[1000+k]), 8, false); err != nil {
			t.Fatal(err)
		}
		e.Flush()
		from := walked.Load()
		time.Sleep(20 * time.Millisecond)
		to := walked.Load()
		e.Disarm(w.tid, 0)
		e.Flush()
		e.Read(func(Trap) { traps++ })
		within += max(to-from-1, 0) // the walk under way at the arm may have passed the slot
	}
	stop.Store(true)
	<-done
	t.Logf("%d traps in 6 re-armed windows of 20 ms; %d walks wholly within them", traps, within)
	if within < 6 || traps < within {
		t.Errorf("%d traps, %d walks wholly within the armed windows: re-arms take effect late", traps, within)
	}
}

// A trap costs the trapping thread something: more than nothing, less
// than a millisecond (it is tens of microseconds in this project's VMs).
func TestTrapCost(t *testing.T) {
	testenv.RequireRoot(t)
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
	_, lost := e.ReadSampled(func(Trap) { t.Error("a trap, with nothing armed") }, func(s Sampled) {
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
	e.ReadSampled(func(Trap) {}, func(Sampled) { n++ })
	if want := float64(after-before) / float64(4*period); float64(n) < 0.7*(want-float64(steal)/float64(4*period)) || float64(n) > 1.3*want+1 {
		t.Errorf("%d samples in %.1f ms of CPU time at a period of 4 ms, %.0f ms stolen", n, float64(after-before)/1e6, float64(steal)/1e6)
	}
}

// One engine holds threads whose leaders sample (Add, after SampleEvery)
// beside threads whose leaders only count (AddCounting): both run the same
// CPU time, only the first is sampled, both trap exactly on their watched
// variable, and a new period reaches the sampling leaders only.
func TestAddCountingBesideSampling(t *testing.T) {
	testenv.RequireRoot(t)
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
	_, lost := e.ReadSampled(func(tr Trap) { traps[tr.TID]++ }, func(s Sampled) { samples[s.Sample.TID]++ })
	if lost > 0 {
		t.Errorf("%d records lost", lost)
	}
	if samples[counting.tid] != 0 || samples[sampled.tid] < 5 {
		t.Errorf("samples by thread %v: want none of the counting thread %d and about 20 of the sampled %d", samples, counting.tid, sampled.tid)
	}
	if traps[sampled.tid] != 100 || traps[counting.tid] != 200 {
		t.Errorf("traps by thread %v: want 100 of %d and 200 of %d (their stores)", traps, sampled.tid, counting.tid)
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
