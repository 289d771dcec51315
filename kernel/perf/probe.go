package perf

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Probe asks the kernel whether an event can be opened at all, on the calling
// thread (which needs no privilege beyond perf_event_paranoid <= 2), and closes it.
func Probe(a eventspec.Attr) error {
	u := Attr(a)
	u.Read_format = 0
	u.Bits |= unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
	fd, err := unix.PerfEventOpen(&u, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return &model.OpenError{Event: "probe", CPU: -1, Err: err, Reason: classify(err)}
	}
	return unix.Close(fd)
}

// HW_BREAKPOINT_W from linux/hw_breakpoint.h.
const (
	hwBreakpointW = 2
)

// probeWrites is how many writes the breakpoint probe makes: at ~12 µs a
// trap in a VM, 12 ms.
const probeWrites = 1000

// ProbeBreakpoint proves that hardware watchpoints fire here, not only that
// they open (some hypervisors accept the event but never pass the debug
// registers through): a write watchpoint on a variable of this thread,
// written probeWrites times, must count at least 99% of them. QEMU's
// emulated x86 (TCG, Debian's 6.1) once counted 999 of 1000 where perf's
// mem: event counted all: its watchpoints fire, and a trap in a thousand
// lost costs a sampler a sample; none counted is what an EPYC guest whose
// hypervisor keeps the debug registers gives.
func ProbeBreakpoint() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	watched, release, err := WatchedWord()
	if err != nil {
		return fmt.Errorf("breakpoint: %w", err)
	}
	defer release()
	u := unix.PerfEventAttr{
		Type:    unix.PERF_TYPE_BREAKPOINT,
		Size:    attrSize,
		Bp_type: hwBreakpointW,
		Ext1:    uint64(uintptr(unsafe.Pointer(watched))),
		Ext2:    8,
		Bits:    unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&u, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return &model.OpenError{Event: "breakpoint", CPU: -1, Err: err, Reason: classify(err)}
	}
	defer unix.Close(fd)
	if err := Enable(fd); err != nil {
		return err
	}
	if err := SignalsHeld(func() { writeN(watched, probeWrites) }); err != nil {
		return fmt.Errorf("breakpoint: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
		return fmt.Errorf("breakpoint: disable: %w", err)
	}
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil {
		return fmt.Errorf("breakpoint: read: %w", err)
	}
	switch n := binary.LittleEndian.Uint64(b[:]); {
	case n == 0:
		return fmt.Errorf("%w: a write watchpoint opened but counted 0 of %d writes: the debug registers do not reach this machine (a hypervisor that does not pass them through)",
			capability.ErrNotInHardware, probeWrites)
	case n < probeWrites*99/100:
		return fmt.Errorf("%w: a write watchpoint counted %d of %d writes: most traps are lost here", capability.ErrNotInHardware, n, probeWrites)
	}
	return nil
}

// WatchedWord is 8 bytes on a page of their own, for a watchpoint on
// what the caller writes: a Go variable may live on the goroutine's stack
// (where escape analysis puts it), which moves when the stack grows, and
// the watchpoint would not follow. release unmaps the page.
func WatchedWord() (w *uint64, release func(), err error) {
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping the watched page: %w", err)
	}
	return (*uint64)(unsafe.Pointer(&page[0])), func() { unix.Munmap(page) }, nil
}

// SignalsHeld runs fn with every signal blocked on the calling thread, so
// that a watchpoint on what fn accesses counts each access once. An arm64
// watchpoint is taken before the access, which the kernel then steps
// over; a signal delivered in between (the Go runtime's preemption signal)
// makes the access run again from the start, and trap again: 1,002 to
// 1,006 traps for 1,000 stores in QEMU's arm64 with signals open, exactly
// 1,000 with them blocked. An x86 watchpoint traps after the access, once.
// Meant for short, known accesses (the breakpoint probe's, tests'): a
// blocked thread defers the runtime's preemption until fn returns.
func SignalsHeld(fn func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, &old); err != nil {
		return fmt.Errorf("blocking signals: %w", err)
	}
	fn()
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil); err != nil {
		return fmt.Errorf("restoring the signal mask: %w", err)
	}
	return nil
}

// writeN writes *p n times, each a real store (atomic: the compiler keeps
// every one).
//
//go:noinline
func writeN(p *uint64, n int) {
	for i := range n {
		atomic.StoreUint64(p, uint64(i))
	}
}

// ProbeCgroup asks whether events can be scoped to the cgroup whose directory fd
// is cgroupFD (cgroup v2, or v1's perf_event hierarchy) on cpu.
func ProbeCgroup(cgroupFD, cpu int) error {
	u := Attr(eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK})
	u.Read_format = 0
	u.Bits |= unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&u, cgroupFD, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC|unix.PERF_FLAG_PID_CGROUP)
	if err != nil {
		return &model.OpenError{Event: "cgroup cpu-clock", CPU: cpu, Err: err, Reason: classify(err)}
	}
	return unix.Close(fd)
}
