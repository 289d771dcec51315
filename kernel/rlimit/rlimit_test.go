package rlimit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// OpenFiles is the kernel's soft limit, as getrlimit gives it.
func TestOpenFiles(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	got, err := OpenFiles()
	if err != nil || got != lim.Cur {
		t.Errorf("OpenFiles() = %d, %v; getrlimit says %d", got, err, lim.Cur)
	}
}

// After RaiseMemlock the soft limit is what it says, and no lower than
// before; raised, it reaches the hard limit (root without CAP_SYS_RESOURCE,
// as in some containers, cannot go beyond).
func TestRaiseMemlock(t *testing.T) {
	from, to, err := RaiseMemlock()
	var lim unix.Rlimit
	if gerr := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); gerr != nil {
		t.Fatal(gerr)
	}
	if lim.Cur != to || to < from {
		t.Errorf("raised from %s to %s (%v), the kernel says %s", KiB(from), KiB(to), err, KiB(lim.Cur))
	}
	if err == nil && lim.Max == Unlimited && to != Unlimited {
		t.Errorf("raised to %s though the hard limit is unlimited", KiB(to))
	}
}

func TestKiB(t *testing.T) {
	if KiB(64<<10) != "64 KiB" || KiB(Unlimited) != "unlimited" {
		t.Errorf("KiB: %q, %q", KiB(64<<10), KiB(Unlimited))
	}
}
