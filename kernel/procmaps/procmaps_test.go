package procmaps

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
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
