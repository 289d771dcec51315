// Package selftest runs validation loops (CAT's "kernels": code whose
// counts are known) and counts them (CAT's on-node self-test, notes §1.5):
// on a thread bound to one CPU, one event at a time on that thread alone,
// never multiplexed (a count whose running time fell short of its enabled
// time is refused), around the loop's work only. Besides the pure loops of
// kernel/selftest/loops it holds the ones that need the operating system:
// fresh pages (minor faults), pipe round trips (context
// switches), a spin of known time on the CPU (task-clock) and writes under a
// watchpoint (breakpoint hits). Its perf_event_open calls go through
// kernel/perf.
package selftest

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpubind"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
)

// Loop is work of a given size with a count known in advance; it calls
// measure around exactly the part that is counted (setup and teardown stay
// outside).
type Loop struct {
	Name string
	// Unit is what one unit of size is (the expected slope's denominator).
	Unit  string
	Sizes []int
	Run   func(size int, measure func(work func()) error) error
	// KernelMode counts the kernel-mode part too (a context switch happens
	// there); the others count user mode only (a page fault is counted
	// from the user-mode access that took it).
	KernelMode bool
	// Repeats is how many times each size runs (0: once); the smallest
	// count is kept. Noise on a thread's own count only adds to it: a
	// burst of time the hypervisor steals inside the enable or disable
	// syscall is task-clock time outside the kernel's size.
	Repeats int
}

// Counter is an event to count, or a write watchpoint on a variable
// (Watch: the one the watched-writes kernel stores to).
type Counter struct {
	Name  string
	Attr  eventspec.Attr
	Watch *uint64
}

// ErrMultiplexed is a count that did not run all the time it was enabled.
var ErrMultiplexed = errors.New("multiplexed: the event did not count all the time it was enabled (another user of the counters?)")

// Measure runs k at each of its sizes on cpu, counting c on the kernel's
// thread, and returns the counts by size.
//
// Where cpu is offline (binding to it fails) or goes offline meanwhile (the
// kernel then widens the bound thread's affinity to move it away: a
// migration the loops do not expect), the error is ErrCPUWentOffline.
func Measure(cpu int, c Counter, k Loop) (counts []float64, err error) {
	rerr := runOn(cpu, func() {
		for _, size := range k.Sizes {
			least := uint64(math.MaxUint64)
			for range max(k.Repeats, 1) {
				var n uint64
				if err = k.Run(size, func(work func()) error {
					v, err := countOnce(c, cpu, k.KernelMode, work)
					n = v
					return err
				}); err != nil {
					return
				}
				if err = stillBound(cpu); err != nil {
					return
				}
				least = min(least, n)
			}
			counts = append(counts, float64(least))
		}
	})
	if rerr != nil {
		return nil, rerr
	}
	return counts, err
}

// runOn runs fn on a thread bound to cpu (cpubind.RunOn). Binding fails
// with EINVAL where cpu is offline: that is ErrCPUWentOffline, which the
// callers measure again elsewhere.
func runOn(cpu int, fn func()) error {
	err := cpubind.RunOn(cpu, fn)
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("CPU %d: %w (or is outside this process's CPU set): %w", cpu, ErrCPUWentOffline, err)
	}
	return err
}

// stillBound checks that the calling thread, bound to cpu alone, still is.
func stillBound(cpu int) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("read the thread's affinity: %w", err)
	}
	if set.Count() != 1 || !set.IsSet(cpu) {
		return fmt.Errorf("CPU %d: %w (the kernel moved the thread bound there)", cpu, ErrCPUWentOffline)
	}
	return nil
}

func countOnce(c Counter, cpu int, withKernel bool, work func()) (uint64, error) {
	u := perf.Attr(c.Attr)
	if c.Watch != nil { // on the counting thread only
		u = unix.PerfEventAttr{Type: unix.PERF_TYPE_BREAKPOINT, Size: perf.AttrSize(), Bp_type: 2, // HW_BREAKPOINT_W
			Ext1: uint64(uintptr(unsafe.Pointer(c.Watch))), Ext2: 8}
	}
	u.Read_format = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING
	u.Bits |= unix.PerfBitDisabled | unix.PerfBitExcludeHv
	if !withKernel {
		u.Bits |= unix.PerfBitExcludeKernel
	}
	fd, err := perf.OpenFD(&u, 0, -1, -1, 0)
	if errors.Is(err, unix.EACCES) && withKernel {
		return 0, fmt.Errorf("%s counts in kernel mode, which on a thread of one's own needs CAP_PERFMON or kernel.perf_event_paranoid ≤ 1: %w", c.Name, err)
	}
	if err != nil {
		return 0, perf.NewOpenError(c.Name, cpu, err)
	}
	defer unix.Close(fd)
	if err := perf.Enable(fd); err != nil {
		return 0, fmt.Errorf("%s: enable: %w", c.Name, err)
	}
	work()
	if err := perf.Disable(fd); err != nil {
		return 0, fmt.Errorf("%s: disable: %w", c.Name, err)
	}
	var b [24]byte
	if _, err := unix.Read(fd, b[:]); err != nil {
		return 0, fmt.Errorf("%s: read: %w", c.Name, err)
	}
	v := *(*[3]uint64)(unsafe.Pointer(&b))
	if v[2] < v[1] {
		return 0, fmt.Errorf("%s: %w (ran %d of %d ns)", c.Name, ErrMultiplexed, v[2], v[1])
	}
	return v[0], nil
}

// geometric is n sizes from start, each twice the one before.
func geometric(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start << i
	}
	return out
}

// InstructionLoop: 1 + 3·n user-mode instructions (slope 3 per iteration).
func InstructionLoop(quick bool) Loop {
	n := 6
	if quick {
		n = 4
	}
	return Loop{Name: "instruction-loop", Unit: "iteration", Sizes: geometric(100_000, n), Run: func(size int, measure func(func()) error) error {
		return measure(func() { loops.InstrLoop(uint64(size)) })
	}}
}

// Branch is CAT's branch kernel k (0-based), size iterations.
func Branch(k int, quick bool) Loop {
	n := 6
	if quick {
		n = 4
	}
	f := loops.Branches[k]
	return Loop{Name: fmt.Sprintf("branch-%d", k+1), Unit: "iteration", Sizes: geometric(50_000, n), Run: func(size int, measure func(func()) error) error {
		return measure(func() { f(uint64(size)) })
	}}
}

// FreshPages touches n pages of a new anonymous mapping (huge pages off):
// n minor faults.
func FreshPages(quick bool) Loop {
	n := 7
	if quick {
		n = 5
	}
	page := unix.Getpagesize()
	return Loop{Name: "fresh-pages", Unit: "page", Sizes: geometric(64, n), Run: func(size int, measure func(func()) error) error {
		mem, err := unix.Mmap(-1, 0, size*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return fmt.Errorf("fresh-pages: mmap %d pages: %w", size, err)
		}
		defer unix.Munmap(mem)
		unix.Madvise(mem, unix.MADV_NOHUGEPAGE) // one fault per page, not per 2 MiB
		return measure(func() {
			for i := 0; i < len(mem); i += page {
				mem[i] = 1
			}
		})
	}}
}

// PipeRoundTrips sends a byte to a partner thread on the same CPU and
// waits for its answer, n times: the counting thread blocks once per round
// trip (one context switch each).
func PipeRoundTrips(quick bool) Loop {
	n := 6
	if quick {
		n = 4
	}
	return Loop{Name: "pipe-round-trips", Unit: "round trip", Sizes: geometric(100, n), KernelMode: true, Run: func(size int, measure func(func()) error) error {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return err
		}
		return roundTrips(size, measure, set)
	}}
}

// roundTrips measures size pipe round trips with a partner thread bound to
// the CPUs of set (the counting thread's). The partner owns the write end
// of the answering pipe and closes it when it stops, so that the counting
// thread, waiting for an answer, sees the end where the partner could not
// start or failed: its CPU going offline between the counting thread's
// binding and the partner's (EINVAL) once left the counting thread waiting
// for ever, and the exporter with it.
func roundTrips(size int, measure func(func()) error, set unix.CPUSet) error {
	var there, back [2]int
	if err := unix.Pipe2(there[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("pipe-round-trips: %w", err)
	}
	if err := unix.Pipe2(back[:], unix.O_CLOEXEC); err != nil {
		unix.Close(there[0])
		unix.Close(there[1])
		return fmt.Errorf("pipe-round-trips: %w", err)
	}
	defer func() {
		for _, fd := range []int{there[0], back[0]} {
			unix.Close(fd)
		}
	}()
	done := make(chan error, 1)
	go func() { // the partner
		defer unix.Close(back[1])
		runtime.LockOSThread()
		if err := unix.SchedSetaffinity(0, &set); errors.Is(err, unix.EINVAL) {
			done <- fmt.Errorf("bind to the counting thread's CPU: %w: %w", ErrCPUWentOffline, err)
			return
		} else if err != nil {
			done <- fmt.Errorf("bind to the counting thread's CPU: %w", err)
			return
		}
		b := []byte{0}
		for range size {
			if n, err := unix.Read(there[0], b); err != nil || n == 0 {
				done <- err // n == 0: the counting thread closed its end early
				return
			}
			if _, err := unix.Write(back[1], b); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var ioErr error
	err := measure(func() {
		b := []byte{0}
		for range size {
			if _, ioErr = unix.Write(there[1], b); ioErr != nil {
				return
			}
			n, err := unix.Read(back[0], b)
			if ioErr = err; err == nil && n == 0 {
				ioErr = errors.New("the partner stopped answering")
			}
			if ioErr != nil {
				return
			}
		}
	})
	unix.Close(there[1]) // the partner sees the end even where the work never ran
	if perr := <-done; perr != nil {
		return fmt.Errorf("pipe-round-trips: partner: %w", perr)
	}
	if ioErr != nil {
		return fmt.Errorf("pipe-round-trips: %w", ioErr)
	}
	return err
}

// Spin runs on the CPU for size ns of wall time, in a run its thread never
// leaves: task-clock counts 1 ns per unit. The thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID) is not the unit because on a VM it leaves out
// the time the hypervisor stole from the vCPU (PARAVIRT_TIME_ACCOUNTING),
// which task-clock, on the scheduler's clock, counts: a CI run under steal
// saw 1.23 task-clock ns per CPU-time ns. A run the thread left (preempted,
// or parked by the Go runtime) is run again, since its wall time holds time
// off the CPU, which task-clock does not count; the sizes stay under a
// scheduler slice (about 1.5 ms on 2 CPUs) so that a CPU shared with a busy
// process still lets runs through. Each size runs three times and keeps
// the least count (Repeats).
func Spin(quick bool) Loop {
	n := 6
	if quick {
		n = 4
	}
	return Loop{Name: "spin", Unit: "ns on the CPU (wall time, in runs without a context switch)", Sizes: geometric(spinLongest>>(n-1), n), Repeats: 3, Run: func(size int, measure func(func()) error) error {
		runs := 0
		for deadline := time.Now().Add(spinPatience); runs < 50 || time.Now().Before(deadline); runs++ {
			var r0, r1 unix.Rusage
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &r0); err != nil {
				return fmt.Errorf("spin: getrusage: %w", err)
			}
			if err := measure(func() { spinFor(int64(size)) }); err != nil {
				return err
			}
			if err := unix.Getrusage(unix.RUSAGE_THREAD, &r1); err != nil {
				return fmt.Errorf("spin: getrusage: %w", err)
			}
			if r1.Nvcsw == r0.Nvcsw && r1.Nivcsw == r0.Nivcsw {
				return nil
			}
		}
		return fmt.Errorf("spin: the thread left its CPU during each of %d runs of %d ns over %v (other threads woke on its CPU more often than that)", runs, size, spinPatience)
	}}
}

// spinLongest is the longest spin in ns; spinPatience is how long, and at
// least 50 runs, one size may keep being switched out (a burst of wakeups
// on its CPU, another test's pipe round trips, passes in that time).
const (
	spinLongest  = 800_000
	spinPatience = 250 * time.Millisecond
)

// spinFor keeps the CPU until CLOCK_MONOTONIC advanced by ns.
func spinFor(ns int64) {
	var t0, t unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &t0)
	for {
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &t)
		if t.Nano()-t0.Nano() >= ns {
			return
		}
	}
}

// WatchedWrites stores n times to v, which a Counter's Watch names: n
// hits.
func WatchedWrites(quick bool, v *uint64) Loop {
	n := 6
	if quick {
		n = 4
	}
	return Loop{Name: "watched-writes", Unit: "write", Sizes: geometric(100, n), Run: func(size int, measure func(func()) error) error {
		return measure(func() {
			for i := range size {
				atomic.StoreUint64(v, uint64(i))
			}
		})
	}}
}

// ChaseSteps is how many steps each size of the pointer chase counts.
const ChaseSteps = 1 << 20

// PointerChase follows a random cycle over a buffer of size bytes, one
// element per 64-byte line (CAT §4; kernel/selftest/loops.Cycle), ChaseSteps
// steps after one warm-up lap: a miss event's count per step shows where
// the buffer stops fitting each cache. Sizes double from half the L1d to
// four times the last level.
func PointerChase(l1d, llc uint64) Loop {
	var sizes []int
	for s := max(l1d/2, 4096); s <= 4*llc && len(sizes) < 24; s *= 2 {
		sizes = append(sizes, int(s))
	}
	return Loop{Name: "pointer-chase", Unit: "step", Sizes: sizes, Run: func(size int, measure func(func()) error) error {
		n := size / 64
		chain := loops.Cycle(n, 8, uint64(size))
		loops.Chase(chain, n) // warm: the lines in the caches they fit
		var end uint64
		err := measure(func() { end = loops.Chase(chain, ChaseSteps) })
		runtime.KeepAlive(end)
		return err
	}}
}
