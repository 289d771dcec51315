package watch

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU is the CPU time process pid (in the caller's pid namespace)
// has run so far, its exited threads' included: the scheduler's exact
// count, read through the process's CPU clock, which Linux lets any
// process read. The governor reads each watched process's ten times a
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
