package safeopen

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// held is a file whose reads the kernel holds until released, as a file
// on a stalled FUSE or NFS mount's would be (this machine has neither,
// and a remote read of a page that userfaultfd never serves fails with
// EIO rather than waiting): it stands in for that file, writing into the
// buffer it was given when it is released, as a late read would.
type held struct {
	release chan struct{}
	reads   atomic.Int32
	closed  atomic.Int32
}

func (h *held) ReadAt(p []byte, off int64) (int, error) {
	h.reads.Add(1)
	<-h.release
	for i := range p {
		p[i] = 0xee
	}
	return len(p), nil
}

func (h *held) Close() error { h.closed.Add(1); return nil }

// A read held in the kernel is given up on within the budget and counted;
// the caller's buffer is never written by it, even once it returns; the
// file is not read again and is closed only once both its owner and the
// held read are done; past MaxAbandoned held reads every read fails at
// once, until they return.
func TestDeadlineGivesUpOnHeldReads(t *testing.T) {
	d := &Deadline{Budget: 50 * time.Millisecond, MaxAbandoned: 2}
	h := &held{release: make(chan struct{})}
	f := d.Timed(h)
	p := make([]byte, 8)
	start := time.Now()
	if _, err := f.ReadAt(p, 0); !errors.Is(err, ErrReadTimeout) {
		t.Fatalf("a held read: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a held read took %v to give up on, budget 50 ms", took)
	}
	if _, err := f.ReadAt(p, 0); !errors.Is(err, ErrReadTimeout) || h.reads.Load() != 1 {
		t.Errorf("the file was read again after a held read (%d reads): %v", h.reads.Load(), err)
	}
	f.Close()
	if h.closed.Load() != 0 {
		t.Error("closed while a read of it is held")
	}
	// A second held file reaches the cap: then nothing is read at all.
	h2 := &held{release: make(chan struct{})}
	d.Timed(h2).ReadAt(make([]byte, 8), 0)
	other := &held{release: make(chan struct{})}
	close(other.release)
	if _, err := d.Timed(other).ReadAt(make([]byte, 8), 0); !errors.Is(err, ErrReadTimeout) || other.reads.Load() != 0 {
		t.Errorf("with 2 reads held (the cap), another was tried (%d reads): %v", other.reads.Load(), err)
	}
	if d.TimedOut() != 2 || d.Outstanding() != 2 {
		t.Errorf("timed out %d, outstanding %d; want 2 and 2", d.TimedOut(), d.Outstanding())
	}
	close(h.release)
	close(h2.release)
	deadline := time.Now().Add(2 * time.Second)
	for d.Outstanding() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if d.Outstanding() != 0 || h.closed.Load() != 1 {
		t.Errorf("after the held reads returned: outstanding %d, closed %d times", d.Outstanding(), h.closed.Load())
	}
	if !bytes.Equal(p, make([]byte, 8)) {
		t.Errorf("the abandoned read wrote into the caller's buffer: %x", p)
	}
	// Below the cap again, a file that answers reads as it is.
	path := filepath.Join(t.TempDir(), "code")
	os.WriteFile(path, []byte("0123456789"), 0o644)
	rf, err := d.Open(func() (*os.File, error) { return Regular(path) })
	if err != nil {
		t.Fatal(err)
	}
	tf := d.Timed(rf)
	defer tf.Close()
	got := make([]byte, 4)
	if n, err := tf.ReadAt(got, 3); n != 4 || err != nil || string(got) != "3456" {
		t.Errorf("a regular read: %d %v %q", n, err, got)
	}
	if n, err := d.ReadAt(func() (io.ReaderAt, io.Closer, error) { f, err := os.Open(path); return f, f, err }, got, 8); n != 2 || err != io.EOF || string(got[:2]) != "89" {
		t.Errorf("a short read at the end: %d %v %q", n, err, got[:n])
	}
}

// An open held in the kernel is given up on too, and the file it gives
// later is closed, not leaked.
func TestDeadlineGivesUpOnHeldOpens(t *testing.T) {
	d := &Deadline{Budget: 50 * time.Millisecond, MaxAbandoned: 4}
	release := make(chan struct{})
	opened := make(chan *os.File, 1)
	_, err := d.Open(func() (*os.File, error) {
		<-release
		f, err := os.Open("/dev/null")
		opened <- f
		return f, err
	})
	if !errors.Is(err, ErrReadTimeout) {
		t.Fatalf("a held open: %v", err)
	}
	close(release)
	f := <-opened
	deadline := time.Now().Add(2 * time.Second)
	for d.Outstanding() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the file the abandoned open gave is still open: %v", err)
	}
}
