package rlimit

import (
	"os"
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

// OpenFDs follows the descriptors this test opens and closes.
func TestOpenFDs(t *testing.T) {
	before, err := OpenFDs()
	if err != nil {
		t.Fatal(err)
	}
	var fs []*os.File
	for range 5 {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	during, _ := OpenFDs()
	for _, f := range fs {
		f.Close()
	}
	after, _ := OpenFDs()
	if during != before+5 || after != before {
		t.Errorf("open fds %d, with 5 more opened %d, closed again %d", before, during, after)
	}
}
