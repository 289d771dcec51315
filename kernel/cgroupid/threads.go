package cgroupid

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Threads lists the threads of the cgroup directory dir and of its
// descendants: cgroup.threads on v2, tasks on v1. A directory that goes
// away meanwhile is passed over.
func Threads(dir string) []uint32 {
	var out []uint32
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		for _, name := range []string{"cgroup.threads", "tasks"} {
			b, err := os.ReadFile(filepath.Join(path, name))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if tid, err := strconv.ParseUint(f, 10, 32); err == nil {
					out = append(out, uint32(tid))
				}
			}
			break
		}
		return nil
	})
	return out
}

// ThreadProcs finds the process of each thread (Tgid in /proc/TID/status,
// through procfs) and remembers it, since it cannot change while the
// thread lives: a watched pod's hundreds of threads are listed every
// second, and each status file is read once. Not safe for concurrent use.
type ThreadProcs struct {
	fs     procfs.FS
	pids   map[uint32]uint32
	listed map[uint32]bool // looked up since the last ForgetUnlisted
}

// NewThreadProcs reads the threads' status under proc.
func NewThreadProcs(proc string) (*ThreadProcs, error) {
	fs, err := procfs.NewFS(proc)
	if err != nil {
		return nil, fmt.Errorf("processes of threads: %w", err)
	}
	return &ThreadProcs{fs: fs, pids: map[uint32]uint32{}, listed: map[uint32]bool{}}, nil
}

// Of is tid's process; false when the thread is gone.
func (t *ThreadProcs) Of(tid uint32) (uint32, bool) {
	pid, ok := t.pids[tid]
	if !ok {
		p, err := t.fs.Proc(int(tid))
		if err != nil {
			return 0, false
		}
		st, err := p.NewStatus()
		if err != nil {
			return 0, false
		}
		pid = uint32(st.TGID)
		t.pids[tid] = pid
	}
	t.listed[tid] = true
	return pid, true
}

// ForgetUnlisted forgets the threads not looked up since its last call:
// they left the listing (exited, or moved out), and their ids may be given
// to other threads.
func (t *ThreadProcs) ForgetUnlisted() {
	for tid := range t.pids {
		if !t.listed[tid] {
			delete(t.pids, tid)
		}
	}
	clear(t.listed)
}
