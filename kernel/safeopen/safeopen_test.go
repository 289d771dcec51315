package safeopen

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
			if f, err := InRoot("/", p); !errors.Is(err, ErrNotRegular) {
				t.Errorf("InRoot(%s) = %v, %v; want ErrNotRegular", p, f, err)
				if f != nil {
					f.Close()
				}
			}
		}
		for _, p := range []string{reg, link} {
			f, err := InRoot("/", p)
			if err != nil {
				t.Errorf("InRoot(%s): %v", p, err)
				continue
			}
			b := make([]byte, 4)
			if _, err := f.ReadAt(b, 0); err != nil || string(b) != "\x7fELF" {
				t.Errorf("%s read %q, %v", p, b, err)
			}
			f.Close()
		}
		if _, err := InRoot("/", filepath.Join(dir, "gone")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a missing file: %v, want not exist", err)
		}
		// Under dir as root, /real.so is dir/real.so, and /abs.so, a link
		// to the absolute reg, is dir/<reg> (absent): not the host's reg.
		if err := os.Symlink(reg, filepath.Join(dir, "abs.so")); err != nil {
			t.Error(err)
		}
		if f, err := InRoot(dir, "/real.so"); err != nil {
			t.Errorf("/real.so under %s: %v", dir, err)
		} else {
			f.Close()
		}
		if f, err := InRoot(dir, "/abs.so"); !errors.Is(err, os.ErrNotExist) {
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

// An input a user names: a FIFO is refused at once (a blocking open
// would wait for a writer for ever); a file over its ceiling is refused
// before a byte is read, naming the flag, its size and the ceiling; one
// within it reads whole; standard input is read up to the ceiling and
// one byte more is an error, so nothing reads without end.
func TestInput(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "defs.yaml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadInput("--definitions", fifo, 100, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "--definitions: open "+fifo) {
			t.Errorf("a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("opening a FIFO named by a flag blocked")
	}
	big := filepath.Join(dir, "big.csv")
	os.WriteFile(big, make([]byte, 101), 0o644)
	if _, err := ReadInput("--replay.file", big, 100, nil); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--replay.file "+big+": too large: 101 bytes, over the 100 bytes it may be") {
		t.Errorf("101 bytes, ceiling 100: %v", err)
	}
	if b, err := ReadInput("--replay.file", big, 101, nil); err != nil || len(b) != 101 {
		t.Errorf("101 bytes, ceiling 101: %d bytes, %v", len(b), err)
	}
	for _, c := range []struct {
		n    int
		fits bool
	}{{99, true}, {100, true}, {101, false}, {1 << 20, false}} {
		b, err := ReadInput("topdown FILE", "-", 100, bytes.NewReader(make([]byte, c.n)))
		switch {
		case c.fits && (err != nil || len(b) != c.n):
			t.Errorf("standard input of %d bytes, ceiling 100: %d bytes read, %v", c.n, len(b), err)
		case !c.fits && (!errors.Is(err, ErrTooLarge) || len(b) != 100 || !strings.Contains(err.Error(), "topdown FILE standard input: too large: over the")):
			t.Errorf("standard input of %d bytes, ceiling 100: %d bytes read, %v", c.n, len(b), err)
		}
	}
	if got := Bytes(16 << 20); got != "16 MiB" {
		t.Errorf("Bytes(16 MiB) = %q", got)
	}
	if got := Bytes(4 << 30); got != "4 GiB" {
		t.Errorf("Bytes(4 GiB) = %q", got)
	}
}
