package cgroupid

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/procfs"
)

// Tasks finds the cgroup a process is in, in the hierarchy that holds the
// perf_event controller: its line of /proc/<pid>/cgroup joined to the
// hierarchy's mount, and that directory's id. It gives samples that carry
// no cgroup id (Arm SPE's records, made from an AUX area) the id
// PERF_SAMPLE_CGROUP would have given them. Each process's id is kept for
// MaxAge, then read again: a PID reused, or a task moved, is seen by then.
// Not safe for concurrent use.
type Tasks struct {
	fs     procfs.FS
	root   string
	v1     bool
	MaxAge time.Duration
	ids    map[uint32]taskCgroup
	now    func() time.Time
}

type taskCgroup struct {
	id uint64
	ok bool
	at time.Time
}

// maxTasks bounds the ids held; past it they are all read again.
const maxTasks = 1 << 16

// NewTasks reads /proc/<pid>/cgroup under proc, for the hierarchy mounted
// at root, cgroup v1's perf_event hierarchy where v1 (else v2).
func NewTasks(proc, root string, v1 bool) (*Tasks, error) {
	fs, err := procfs.NewFS(proc)
	if err != nil {
		return nil, fmt.Errorf("cgroups of processes: %w", err)
	}
	return &Tasks{fs: fs, root: root, v1: v1, MaxAge: 10 * time.Second, ids: map[uint32]taskCgroup{}, now: time.Now}, nil
}

// ID is the id of the cgroup process pid is in; false where it cannot be
// told (the process has exited, or its cgroup is not under root).
func (t *Tasks) ID(pid uint32) (uint64, bool) {
	now := t.now()
	if c, ok := t.ids[pid]; ok && now.Sub(c.at) < t.MaxAge {
		return c.id, c.ok
	}
	if len(t.ids) >= maxTasks {
		clear(t.ids)
	}
	id, err := t.read(pid)
	t.ids[pid] = taskCgroup{id: id, ok: err == nil, at: now}
	return id, err == nil
}

func (t *Tasks) read(pid uint32) (uint64, error) {
	p, err := t.fs.Proc(int(pid))
	if err != nil {
		return 0, err
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return 0, err
	}
	path, err := perfEventPath(cgs, t.v1)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return ID(filepath.Join(t.root, path))
}

// perfEventPath is the path of the perf_event hierarchy among a process's
// cgroups: v2's (hierarchy 0, no controllers listed), or the v1 one whose
// controllers include perf_event.
func perfEventPath(cgs []procfs.Cgroup, v1 bool) (string, error) {
	for _, cg := range cgs {
		if !v1 && cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			return cg.Path, nil
		}
		if v1 && slices.Contains(cg.Controllers, "perf_event") {
			return cg.Path, nil
		}
	}
	if v1 {
		return "", fmt.Errorf("no perf_event line in its cgroup file")
	}
	return "", fmt.Errorf("no cgroup v2 line (0::) in its cgroup file")
}
