package selftest

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
)

// freshPages are n fresh pages, unmapped when the test ends.
func freshPages(t *testing.T, n int) (mem []byte, page int) {
	t.Helper()
	mem, page, release, err := FreshMapping(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return mem, page
}

func pageFaultSampler(period uint64) Sampler {
	return Sampler{Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS, ExcludeKernel: true},
		Period: period, SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_REGS_USER, RegsUser: memop.RegsMask(runtime.GOARCH)}
}

// A page-fault sampler at period 1 over TwoStores on 1,024 fresh pages:
// one sample per page written, each at the byte written, from two store
// instructions 512 times each; the event's own count holds them all (and
// any fault of the Go runtime's beside them), and nothing is lost.
func TestSamplePageFaults(t *testing.T) {
	testenv.RequireRoot(t)
	mem, page := freshPages(t, 1024)
	var wrote int
	run, err := Sample(pageFaultSampler(1), 64, func() { wrote = loops.TwoStores(mem, page) })
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	right, byIP := 0, map[uint64]int{}
	for _, s := range run.Samples {
		k := (s.Addr - base) / uint64(page)
		if s.Addr >= base && k < uint64(wrote) && s.Addr == base+k*uint64(page)+uint64(loops.StoreOffsets[k%2]) {
			right++
			byIP[s.IP]++
		}
	}
	if wrote != 1024 || right != wrote || len(byIP) != 2 || run.Count < uint64(wrote) || run.Lost+run.Dropped != 0 {
		t.Errorf("wrote %d pages: %d samples at the bytes written, by IP %v; count %d, lost %d, dropped %d", wrote, right, byIP, run.Count, run.Lost, run.Dropped)
	}
	for ip, n := range byIP {
		if n != wrote/2 {
			t.Errorf("store at %#x: %d samples, want %d", ip, n, wrote/2)
		}
	}
}

// A sampler behind a counting group leader, as PEBS mem-loads must sit
// behind mem-loads-aux on Sapphire Rapids: here the page-fault sampler
// behind task-clock. Enabling the leader runs the member: the same 1,024
// samples at the bytes written as alone. Software events are never
// multiplexed, so the kernel says the sampler ran all the time it was
// enabled, and that was a while.
func TestSampleBehindALeader(t *testing.T) {
	testenv.RequireRoot(t)
	mem, page := freshPages(t, 1024)
	s := pageFaultSampler(1)
	s.Leader = &eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK, ExcludeKernel: true}
	var wrote int
	run, err := Sample(s, 64, func() { wrote = loops.TwoStores(mem, page) })
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	right := 0
	for _, smp := range run.Samples {
		if smp.Addr >= base && smp.Addr < base+uint64(len(mem)) {
			right++
		}
	}
	if right != wrote || run.Count < uint64(wrote) {
		t.Errorf("wrote %d pages: %d samples in them, count %d", wrote, right, run.Count)
	}
	if run.Enabled <= 0 || run.Running != run.Enabled {
		t.Errorf("enabled %v, running %v: a software event runs all the time it is enabled", run.Enabled, run.Running)
	}
}

// A ring too small for the run (one page for 1,024 samples of some 200
// bytes) drops samples without a LOST record after them, nobody reading it
// meanwhile: Dropped is what the event's own count says was due beyond
// what the ring held, so that held and dropped make the count.
func TestSampleDroppedByAFullRing(t *testing.T) {
	testenv.RequireRoot(t)
	mem, page := freshPages(t, 1024)
	run, err := Sample(pageFaultSampler(1), 1, func() { loops.TwoStores(mem, page) })
	if err != nil {
		t.Fatal(err)
	}
	if run.Dropped == 0 || uint64(len(run.Samples))+run.Lost+run.Dropped != run.Count {
		t.Errorf("%d samples held, %d lost, %d dropped: want some dropped, and all of them the count %d", len(run.Samples), run.Lost, run.Dropped, run.Count)
	}
}

// A timer sampler (cpu-clock, user mode) gives samples in step with the
// thread's CPU time, as the kernel's thread clock counts it, all in user
// mode, nearly all in the two loops the thread ran, about half in each.
func TestSampleTimerFollowsCPUTime(t *testing.T) {
	testenv.RequireRoot(t)
	const period = 1_000_000
	run, err := Sample(Sampler{Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, ExcludeKernel: true},
		Period: period, SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID, RegsUser: 0}, 16, func() {
		for start := time.Now(); time.Since(start) < 150*time.Millisecond; {
			loops.SpinA(100_000)
			loops.SpinB(100_000)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := float64(run.CPUTime) / period
	in := map[string]int{}
	kernel := 0
	for _, s := range run.Samples {
		if s.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK != unix.PERF_RECORD_MISC_USER {
			kernel++
		}
		if f := runtime.FuncForPC(uintptr(s.IP)); f != nil {
			in[f.Name()]++
		}
	}
	a, b := in["github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops.SpinA"], in["github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops.SpinB"]
	n := len(run.Samples)
	if want < 50 || float64(n) < 0.8*want || float64(n) > 1.1*want || kernel != 0 || float64(a+b) < 0.9*float64(n) || a < n/4 || b < n/4 {
		t.Errorf("%d samples over %v of CPU time (%.0f due), %d in kernel mode, SpinA %d, SpinB %d", n, run.CPUTime, want, kernel, a, b)
	}
}
