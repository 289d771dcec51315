package perf

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The few plain syscalls the other perf packages (the sampler, the
// watchpoints, the probes) make around their events, here so that the
// kernel packages that call the kernel directly stay few (as cilium/ebpf
// keeps its syscalls in internal/sys).

// CloseFD closes an event's file descriptor.
func CloseFD(fd int) error { return unix.Close(fd) }

// ReadFD reads an event's file descriptor (its read_format values).
func ReadFD(fd int, b []byte) (int, error) { return unix.Read(fd, b) }

// Gettid is the calling thread's id; the caller keeps itself on its
// thread (runtime.LockOSThread) for as long as the id matters.
func Gettid() uint32 { return uint32(unix.Gettid()) }

// MonotonicNow is CLOCK_MONOTONIC in ns, the clock the samples and traps
// of events opened with use_clockid carry; false where it cannot be read.
func MonotonicNow() (uint64, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0, false
	}
	return uint64(ts.Nano()), true
}

// ThreadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func ThreadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("thread CPU clock: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// OwnCPU is this process's user and system CPU time (getrusage); 0 where
// it cannot be read.
func OwnCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU is the CPU time process pid (in the caller's pid namespace)
// has run so far, its exited threads' included: the scheduler's exact
// count, read through the process's CPU clock, which Linux lets any
// process read. The watch budget reads each watched process's ten times a
// second; reading and parsing /proc/PID/stat for it was a fifth of the
// exporter's CPU with watchpoints (docs/benchmarks.md).
func ProcessCPU(pid uint32) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(processClock(pid), &ts); err != nil {
		return 0, fmt.Errorf("CPU clock of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// processClock is the clock id of pid's process CPU clock as the kernel
// encodes it (MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED): the pid's
// complement shifted past the clock's three type bits).
func processClock(pid uint32) int32 {
	const cpuclockSched = 2
	return ^int32(pid)<<3 | cpuclockSched
}

// bpfStatsPath is the sysctl an operator turns the kernel's BPF run-time
// accounting on with.
const bpfStatsPath = "/proc/sys/kernel/bpf_stats_enabled"

// BPFStatsEnabled says whether the kernel accounts BPF programs' run time
// (the eBPF programs at context switches read it to report theirs).
func BPFStatsEnabled() bool {
	b, err := os.ReadFile(bpfStatsPath)
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
