package watch

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/collectors/procmaps"
	"github.com/pmu-exporter/pmu_exporter/comm/addrmap"
	"github.com/pmu-exporter/pmu_exporter/comm/codemap"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
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

//go:noinline
func store(p *uint64, n int) {
	for i := range n {
		atomic.StoreUint64(p, uint64(i))
	}
}

//go:noinline
func load(p *uint64, n int) (s uint64) {
	for range n {
		s += atomic.LoadUint64(p)
	}
	return s
}

// Watchpoints armed from outside a thread trap exactly on its accesses to
// the watched bytes, stores only or loads too, and re-arming moves them
// (PERF_EVENT_IOC_MODIFY_ATTRIBUTES): counted against the accesses the
// thread made, with the trapping code and the thread's CPU time.
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
	e := New(slots, 256) // 1 MiB: a thousand traps with their registers
	defer e.Close()
	if err := e.Add(w.tid); err != nil {
		t.Fatal(err)
	}
	vars := make([]uint64, 16) // distinct 8-byte slots
	a, b := &vars[0], &vars[8]
	count := func() map[int]int {
		n := map[int]int{}
		_, lost := e.Read(func(tr Trap) {
			if tr.Regs == nil || tr.Regs[memop.AMD64IP] != tr.IP && runtime.GOARCH == "amd64" {
				t.Errorf("trap without the registers at its IP")
			}
			if tr.TID != w.tid {
				t.Errorf("trap of thread %d, watching %d", tr.TID, w.tid)
			}
			if name := runtime.FuncForPC(uintptr(tr.IP) - 1).Name(); !strings.Contains(name, "watch.store") && !strings.Contains(name, "watch.load") {
				t.Errorf("trap at %#x in %s", tr.IP, name)
			}
			n[tr.Slot]++
		})
		if lost > 0 {
			t.Errorf("%d traps lost", lost)
		}
		return n
	}
	if err := e.Arm(w.tid, 0, addr(a), 8, true); err != nil {
		t.Fatal(err)
	}
	before, _ := e.Clock(w.tid)
	w.run(func() { store(a, 1000); load(a, 700); store(b, 300) })
	after, _ := e.Clock(w.tid)
	if n := count(); n[0] != 1000 || len(n) != 1 {
		t.Errorf("store watchpoint on a: %v, want 1000 traps on slot 0 (the 700 loads and b's stores do not trap)", n)
	}
	if after <= before {
		t.Errorf("task-clock %d then %d", before, after)
	}
	// Re-armed on b for loads and stores, in slot 2.
	e.Disarm(w.tid, 0)
	if err := e.Arm(w.tid, 2, addr(b), 8, false); err != nil {
		t.Fatal(err)
	}
	var clocks []uint64
	w.run(func() { store(a, 100); load(b, 250); store(b, 50) })
	// Each trap's access, decoded from the instruction before its IP with
	// its registers, is the watched variable: 250 loads, then 50 stores.
	res := resolver(t)
	kinds := map[memop.Kind]int{}
	e.Read(func(tr Trap) {
		clocks = append(clocks, tr.Clock)
		acc, r := res.Before(tr.PID, tr.IP, tr.Regs)
		if r != memop.Resolved || acc.Addr != addr(b) || acc.Width != 8 {
			t.Errorf("trap at %#x decodes to %+v (%v), want the 8 bytes at %#x", tr.IP, acc, r, addr(b))
			return
		}
		kinds[acc.Kind]++
	})
	// atomic.StoreUint64 is an xchg on x86-64: a read-modify-write.
	if len(clocks) != 300 || kinds[memop.Load] != 250 || kinds[memop.Store]+kinds[memop.RMW] != 50 {
		t.Errorf("read/write watchpoint on b: %d traps (decoded %v), want 250 loads + 50 stores", len(clocks), kinds)
	}
	for i := 1; i < len(clocks); i++ {
		if clocks[i] < clocks[i-1] {
			t.Errorf("the distance clock went back: %d after %d", clocks[i], clocks[i-1])
			break
		}
	}
	e.Disarm(w.tid, 2)
	w.run(func() { store(b, 100) })
	if n := count(); len(n) != 0 {
		t.Errorf("disarmed: %v", n)
	}
}

func addr(p *uint64) uint64 { return uint64(uintptr(unsafe.Pointer(p))) }

// The costs behind the governor: re-arming a watchpoint from outside
// (MODIFY_ATTRIBUTES, and enable), and a trap, as the extra time of a
// watched store over an unwatched one.
func BenchmarkArm(b *testing.B) {
	w := startWorker(b)
	e := New(1, 8)
	defer e.Close()
	if err := e.Add(w.tid); err != nil {
		b.Skip(err)
	}
	var v [2]uint64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		e.Arm(w.tid, 0, addr(&v[i%2]), 8, true)
	}
}

func BenchmarkTrap(b *testing.B) {
	for _, watched := range []bool{false, true} {
		b.Run(map[bool]string{false: "unwatched", true: "watched"}[watched], func(b *testing.B) {
			w := startWorker(b)
			e := New(1, 256)
			defer e.Close()
			if err := e.Add(w.tid); err != nil {
				b.Skip(err)
			}
			var v uint64
			if watched {
				e.Arm(w.tid, 0, addr(&v), 8, true)
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
	r, err := memop.NewResolver(code, memop.Auto, runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	return r
}
