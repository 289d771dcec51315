package cgroupid

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Tasks finds the cgroup a process is in, in the hierarchy that holds the
// perf_event controller: its line of /proc/<pid>/cgroup joined to the
// hierarchy's mount, and that directory's id. It gives samples that carry
// no cgroup id (Arm SPE's records, made from an AUX area) the id
// PERF_SAMPLE_CGROUP would have given them. Each process's id is kept for
// MaxAge, then read again: a PID reused, or a task moved, is seen by then.
// Not safe for concurrent use.
type Tasks struct {
	proc, root string
	v1         bool
	MaxAge     time.Duration
	ids        map[uint32]taskCgroup
	now        func() time.Time
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
func NewTasks(proc, root string, v1 bool) *Tasks {
	return &Tasks{proc: proc, root: root, v1: v1, MaxAge: 10 * time.Second, ids: map[uint32]taskCgroup{}, now: time.Now}
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
	b, err := os.ReadFile(filepath.Join(t.proc, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return 0, err
	}
	path, err := perfEventPath(b, t.v1)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return ID(filepath.Join(t.root, path))
}

// perfEventPath is the path of /proc/<pid>/cgroup's line for the
// perf_event hierarchy: v2's "0::/path", or the v1 line whose controllers
// include perf_event.
func perfEventPath(b []byte, v1 bool) (string, error) {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		id, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if !v1 && id == "0" && ctrls == "" {
			return path, nil
		}
		if v1 {
			for _, c := range strings.Split(ctrls, ",") {
				if c == "perf_event" {
					return path, nil
				}
			}
		}
	}
	if v1 {
		return "", fmt.Errorf("no perf_event line in its cgroup file")
	}
	return "", fmt.Errorf("no cgroup v2 line (0::) in its cgroup file")
}
