package perfsample

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A FIFO, a device, a directory and a socket where a mapped file was are
// refused at once, without waiting for a writer (a blocking open of the
// FIFO would wait for ever: the test's own deadline says so); a regular
// file, also through a symbolic link, opens and reads; an absolute link
// resolves inside the root it is opened under, as in the process's own
// filesystem, not in the exporter's.
func TestOpenRegularRefusesWhatBlocks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "lib.so")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "real.so")
	if err := os.WriteFile(reg, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.so")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{fifo, "/dev/zero", "/dev/null", dir, sock} {
			if f, err := openRegular("/", p); !errors.Is(err, errNotRegular) {
				t.Errorf("openRegular(%s) = %v, %v; want errNotRegular", p, f, err)
				if f != nil {
					f.Close()
				}
			}
		}
		for _, p := range []string{reg, link} {
			f, err := openRegular("/", p)
			if err != nil {
				t.Errorf("openRegular(%s): %v", p, err)
				continue
			}
			b := make([]byte, 4)
			if _, err := f.ReadAt(b, 0); err != nil || string(b) != "\x7fELF" {
				t.Errorf("%s read %q, %v", p, b, err)
			}
			f.Close()
		}
		if _, err := openRegular("/", filepath.Join(dir, "gone")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a missing file: %v, want not exist", err)
		}
		// Under dir as root, /real.so is dir/real.so, and /abs.so, a link
		// to the absolute reg, is dir/<reg> (absent): not the host's reg.
		if err := os.Symlink(reg, filepath.Join(dir, "abs.so")); err != nil {
			t.Error(err)
		}
		if f, err := openRegular(dir, "/real.so"); err != nil {
			t.Errorf("/real.so under %s: %v", dir, err)
		} else {
			f.Close()
		}
		if f, err := openRegular(dir, "/abs.so"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("/abs.so -> %s under %s opened %v, %v: want it resolved inside, where there is none", reg, dir, f, err)
			if f != nil {
				f.Close()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("openRegular blocked")
	}
}
