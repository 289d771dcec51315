package perfsample

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openRegular opens name under root (a process's /proc/PID/root) for
// reading only if it is a regular file, and without blocking: a sampled
// process controls what the paths of its mappings name by now (a FIFO
// renamed over a library it mapped), and a blocking open of a FIFO waits
// for a writer for ever, the decoder and every scrape behind it. The name
// is resolved inside root (openat2's RESOLVE_IN_ROOT: an absolute symbolic
// link in a container points into the container, not into the host) and
// opened O_PATH, which opens no device and waits on no FIFO; its inode is
// checked; then that same inode is opened for reading through
// /proc/self/fd, so nothing swapped in between can be read instead.
func openRegular(root, name string) (*os.File, error) {
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
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("open %s: %w (mode %#o)", path, errNotRegular, st.Mode&unix.S_IFMT)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// errNotRegular: a mapped path that names a FIFO, a device, a socket or a
// directory now.
var errNotRegular = errors.New("not a regular file")
