// Package safeopen opens files that someone else controls, so that what
// they are cannot reach the exporter's control flow: the files sampled
// processes map (InRoot), and the files a user names on the command line
// (Input). Only a regular file is opened, without blocking (a FIFO waits
// for a writer for ever; a device may act on open), and an input is read
// no further than its ceiling.
package safeopen

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// InRoot opens name under root (a process's /proc/PID/root) for
// reading only if it is a regular file, and without blocking: a sampled
// process controls what the paths of its mappings name by now (a FIFO
// renamed over a library it mapped), and a blocking open of a FIFO waits
// for a writer for ever, the decoder and every scrape behind it. The name
// is resolved inside root (openat2's RESOLVE_IN_ROOT: an absolute symbolic
// link in a container points into the container, not into the host) and
// opened O_PATH, which opens no device and waits on no FIFO; its inode is
// checked; then that same inode is opened for reading through
// /proc/self/fd, so nothing swapped in between can be read instead.
func InRoot(root, name string) (*os.File, error) {
	path := root + name
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dfd)
	pfd, err := unix.Openat2(dfd, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err == unix.ENOSYS {
		// Before Linux 5.6: resolved as the host resolves it.
		pfd, err = unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	return reopen(pfd, path)
}

// reopen opens the inode that pfd (an O_PATH descriptor) holds for
// reading, if it is a regular file.
func reopen(pfd int, path string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("open %s: %w (mode %#o)", path, ErrNotRegular, st.Mode&unix.S_IFMT)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Regular opens path for reading if it is a regular file, as InRoot does
// but resolved as the exporter resolves it: a file a user names.
func Regular(path string) (*os.File, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	return reopen(pfd, path)
}

// Input opens what a flag names for reading: standard input for "-",
// else a regular file (Regular) of at most ceiling bytes. What it returns
// reads no more than ceiling bytes whatever the file does meanwhile (it
// grows, or standard input goes on): one more is ErrTooLarge, naming the
// flag. The ceilings say what no real input of the kind comes near.
func Input(flag, path string, ceiling int64, stdin io.Reader) (io.ReadCloser, error) {
	if path == "-" {
		if stdin == nil {
			return nil, fmt.Errorf("%s: - (standard input) is not a file here", flag)
		}
		return io.NopCloser(&capped{r: stdin, left: ceiling, flag: flag, path: "standard input", ceiling: ceiling}), nil
	}
	f, err := Regular(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if fi.Size() > ceiling {
		f.Close()
		return nil, fmt.Errorf("%s %s: %w: %d bytes, over the %s it may be", flag, path, ErrTooLarge, fi.Size(), Bytes(ceiling))
	}
	return struct {
		io.Reader
		io.Closer
	}{&capped{r: f, left: ceiling, flag: flag, path: path, ceiling: ceiling}, f}, nil
}

// ReadInput reads the whole of what Input opens.
func ReadInput(flag, path string, ceiling int64, stdin io.Reader) ([]byte, error) {
	r, err := Input(flag, path, ceiling, stdin)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// capped reads at most ceiling bytes of r; a byte more is an error.
type capped struct {
	r             io.Reader
	left, ceiling int64
	flag, path    string
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.tooLarge()
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1] // one byte past the ceiling says there is more
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n - 1, c.tooLarge()
	}
	return n, err
}

func (c *capped) tooLarge() error {
	return fmt.Errorf("%s %s: %w: over the %s it may be", c.flag, c.path, ErrTooLarge, Bytes(c.ceiling))
}

// ErrTooLarge: an input over its ceiling.
var ErrTooLarge = errors.New("too large")

// Bytes writes a ceiling in bytes, MiB or GiB.
func Bytes(n int64) string {
	if n < 1<<20 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	if n >= 1<<30 && n%(1<<30) == 0 {
		return strconv.FormatInt(n>>30, 10) + " GiB"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

// The ceilings of the kinds of input.
const (
	// YAML: a configuration or a Top-Down definitions file (the largest
	// built-in tree's definitions are under 1 MiB).
	YAML = 16 << 20
	// Recording: perf stat's output, which replay and topdown load whole
	// (an hour of 1 s intervals of 30 events on 512 CPUs is about 3 GiB:
	// record a shorter span, or fewer CPUs).
	Recording = 256 << 20
	// Trace: an access trace (reuse --trace, --replay.trace), read a line
	// at a time.
	Trace = 4 << 30
	// Document: a JSON document or a scrape (--replay.validation,
	// --replay.self).
	Document = 64 << 20
)

// ErrNotRegular: a mapped path that names a FIFO, a device, a socket or a
// directory now.
var ErrNotRegular = errors.New("not a regular file")
