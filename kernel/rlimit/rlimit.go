// Package rlimit reads and raises the process's resource limits that
// counting and sampling run into: open files (one per event per CPU) and
// locked memory (perf rings, AUX areas, and BPF maps before Linux 5.11).
package rlimit

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Unlimited is RLIM_INFINITY.
const Unlimited = unix.RLIM_INFINITY

// OpenFiles is the soft limit on open files.
func OpenFiles() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}

// RaiseMemlock lifts the locked-memory limit as far as the process may:
// beyond kernel.perf_event_mlock_kb the kernel charges perf's rings and AUX
// areas to RLIMIT_MEMLOCK (without CAP_IPC_LOCK), and kernels before 5.11
// charge BPF maps to it. With CAP_SYS_RESOURCE the limit goes to unlimited;
// without, the soft limit rises to the hard one. It returns the soft limit
// before and after; err where it could not be raised at all.
func RaiseMemlock() (from, to uint64, err error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return 0, 0, err
	}
	if lim.Cur == unix.RLIM_INFINITY {
		return lim.Cur, lim.Cur, nil
	}
	want := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	err = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &want)
	if err != nil && lim.Cur < lim.Max {
		want = unix.Rlimit{Cur: lim.Max, Max: lim.Max}
		if unix.Setrlimit(unix.RLIMIT_MEMLOCK, &want) == nil {
			err = nil
		}
	}
	if err != nil {
		return lim.Cur, lim.Cur, err
	}
	return lim.Cur, want.Cur, nil
}

// KiB writes a limit in KiB, or "unlimited".
func KiB(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(v>>10, 10) + " KiB"
}

// OpenFDs is how many file descriptors the process holds now.
func OpenFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	return len(names) - 1, nil // less the directory's own
}
