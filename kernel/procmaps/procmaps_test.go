package procmaps

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
)

// This process's own mappings: a file the test maps names its path and
// the file offset of the address.
func TestNamerOnSelf(t *testing.T) {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, make([]byte, 4*page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), int64(page), 3*page, unix.PROT_READ, unix.MAP_SHARED) // file pages 1-3
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	name := Namer(fs)
	pid := uint32(os.Getpid())
	addr := uint64(uintptr(unsafe.Pointer(&mem[page+40])))
	if got, want := name(pid, addr), fmt.Sprintf("%s+%#x", path, 2*page+40); got != want {
		t.Errorf("mapped file: %q, want %q", got, want)
	}
	if name(1<<30, addr) != "" {
		t.Error("a process that does not exist named an address")
	}
}

// FuzzRead: whatever /proc/PID/maps says (a process names its mappings:
// a path may hold spaces, newlines' look-alikes, " (deleted)", any
// bytes), reading it gives mappings or an error, never a panic, and the
// address map that holds them names any address without one either.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n",
		"7f3b1c000000-7f3b1c021000 rw-p 00000000 00:00 0 \n7ffd5e3c2000-7ffd5e3e3000 rw-p 00000000 00:00 0                          [stack]\n",
		"55d0a0a00000-55d0a0a01000 r-xp 00001000 fd:01 42 /tmp/a b/lib spin.so (deleted)\n",
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n",
		"00400000-00300000 r-xp ffffffffffffffff 08:02 1 /x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, maps []byte) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "7", "maps"), maps, 0o644); err != nil {
			t.Fatal(err)
		}
		fs, err := procfs.NewFS(root)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Read(fs, 7)
		if err != nil {
			return
		}
		am := addrmap.New()
		am.Set(7, m)
		for _, mp := range m {
			for _, a := range []uint64{mp.Start, mp.End - 1, mp.End, (mp.Start + mp.End) / 2} {
				am.Find(7, a)
				am.Name(7, a)
			}
		}
	})
}
