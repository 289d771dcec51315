package safeopen

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrReadTimeout: a read that did not return within its budget. The read
// goes on in the kernel (a read cannot be taken back); the reader has
// given up on it.
var ErrReadTimeout = errors.New("read did not return in time")

// Deadline bounds reads in time: a file on a stalled FUSE or NFS mount,
// or a page of a process's memory that a fault handler never serves,
// holds a read in the kernel for as long as its owner wishes. Each read
// runs on a goroutine of its own, into a buffer of its own, and is waited
// for at most Budget; one that has not returned by then is abandoned and
// counted, and its goroutine ends whenever the kernel returns it. At most
// MaxAbandoned are outstanding: past that every read fails at once, so
// that a process cannot make the exporter pile up goroutines and
// descriptors.
type Deadline struct {
	Budget       time.Duration
	MaxAbandoned int64

	outstanding atomic.Int64 // abandoned reads not yet returned
	timedOut    atomic.Uint64
}

// TimedOut is how many reads were abandoned so far.
func (d *Deadline) TimedOut() uint64 { return d.timedOut.Load() }

// Outstanding is how many abandoned reads the kernel still holds.
func (d *Deadline) Outstanding() int64 { return d.outstanding.Load() }

// ReadAt reads len(p) bytes at off of what open gives (opened on the
// read's goroutine: an open may hang as a read does), within the budget.
// What open gave is closed after the read, by whichever goroutine ends
// last.
func (d *Deadline) ReadAt(open func() (io.ReaderAt, io.Closer, error), p []byte, off int64) (int, error) {
	buf := make([]byte, len(p)) // the abandoned read writes here, never into p
	n, err := within(d, func() (int, error) {
		r, c, err := open()
		if err != nil {
			return 0, err
		}
		if c != nil {
			defer c.Close()
		}
		return r.ReadAt(buf, off)
	}, nil)
	copy(p, buf[:n])
	return n, err
}

// Open runs open within the budget (an open on a stalled mount hangs as
// a read does); a file an abandoned open gives later is closed.
func (d *Deadline) Open(open func() (*os.File, error)) (*os.File, error) {
	return within(d, open, func(f *os.File) {
		if f != nil {
			f.Close()
		}
	})
}

// within runs op on a goroutine of its own and waits at most d's budget
// for it. Past that, op is abandoned and counted, and release (if any)
// gets what it returns whenever it does; past MaxAbandoned outstanding,
// op is not run at all.
func within[T any](d *Deadline, op func() (T, error), release func(T)) (T, error) {
	var zero T
	if n := d.outstanding.Load(); n >= d.MaxAbandoned {
		return zero, fmt.Errorf("%w: %d earlier reads still held in the kernel", ErrReadTimeout, n)
	}
	type result struct {
		v   T
		err error
	}
	var mu sync.Mutex
	abandoned := false
	done := make(chan result, 1)
	go func() {
		v, err := op()
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			// Released before it stops counting as held: Outstanding at 0
			// means nothing of an abandoned op is left open.
			if release != nil {
				release(v)
			}
			d.outstanding.Add(-1)
			return
		}
		done <- result{v, err}
	}()
	timer := time.NewTimer(d.Budget)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done: // it returned as the budget ran out
		return r.v, r.err
	default:
	}
	abandoned = true
	d.outstanding.Add(1)
	d.timedOut.Add(1)
	return zero, fmt.Errorf("%w (%v)", ErrReadTimeout, d.Budget)
}

// File is an open file whose reads are bounded by a Deadline. Once one of
// its reads has been abandoned it is not read again (every later read
// fails at once), and it is closed when that read returns.
type File struct {
	f     ReaderAtCloser
	d     *Deadline
	mu    sync.Mutex
	stuck bool
	users int  // reads running, and the owner until Close
	owner bool // Close not called yet
}

// ReaderAtCloser is what a File reads.
type ReaderAtCloser interface {
	io.ReaderAt
	io.Closer
}

// Timed bounds f's reads by d.
func (d *Deadline) Timed(f ReaderAtCloser) *File {
	return &File{f: f, d: d, users: 1, owner: true}
}

// ReadAt reads within the deadline's budget.
func (t *File) ReadAt(p []byte, off int64) (int, error) {
	t.mu.Lock()
	if t.stuck {
		t.mu.Unlock()
		return 0, fmt.Errorf("%w: an earlier read of this file is still held", ErrReadTimeout)
	}
	t.users++
	t.mu.Unlock()
	n, err := t.d.ReadAt(func() (io.ReaderAt, io.Closer, error) { return t.f, closerFunc(t.release), nil }, p, off)
	if errors.Is(err, ErrReadTimeout) {
		t.mu.Lock()
		t.stuck = true
		t.mu.Unlock()
	}
	return n, err
}

// Close closes the file once no read of it is held.
func (t *File) Close() error {
	t.mu.Lock()
	if !t.owner {
		t.mu.Unlock()
		return nil
	}
	t.owner = false
	t.mu.Unlock()
	return t.release()
}

// release lets go of one use; the last closes the file.
func (t *File) release() error {
	t.mu.Lock()
	t.users--
	last := t.users == 0
	t.mu.Unlock()
	if last {
		return t.f.Close()
	}
	return nil
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }
