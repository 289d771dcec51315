package cgroupid

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// A v2 tree (cgroup.threads) with a child, a v1 directory (tasks), and a
// directory with neither: every listed thread, from the files as written.
func TestThreadsOfATree(t *testing.T) {
	root := t.TempDir()
	write := func(rel, name, data string) {
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "" {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("pod", "cgroup.threads", "10\n11\n")
	write("pod/ctr", "cgroup.threads", "12\n")
	write("v1", "tasks", "20\nnot-a-tid\n21\n")
	write("empty", "", "")
	got := Threads(root)
	slices.Sort(got)
	if want := []uint32{10, 11, 12, 20, 21}; !slices.Equal(got, want) {
		t.Errorf("threads %v, want %v", got, want)
	}
	if got := Threads(filepath.Join(root, "gone")); len(got) != 0 {
		t.Errorf("a missing directory lists %v", got)
	}
}

// The listing's thread → process map: this process's threads are this
// process's, as /proc/self/task says; a thread's status is read once while
// it stays listed (its file gone, the process is still known), and read
// again once a listing left it out.
func TestThreadProcs(t *testing.T) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	procs := mustThreadProcs(t, "/proc")
	found := 0
	for _, task := range tasks {
		tid, _ := strconv.ParseUint(task.Name(), 10, 32)
		pid, ok := procs.Of(uint32(tid))
		if ok && pid != uint32(os.Getpid()) {
			t.Errorf("thread %d is process %d's, the cache says %d", tid, os.Getpid(), pid)
		}
		if ok {
			found++
		}
	}
	if found == 0 {
		t.Errorf("none of this process's %d threads found", len(tasks))
	}

	proc := t.TempDir()
	status := filepath.Join(proc, "123", "status")
	if err := os.MkdirAll(filepath.Dir(status), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(status, []byte("Name:\tw\nTgid:\t77\nPid:\t123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	procs = mustThreadProcs(t, proc)
	if pid, ok := procs.Of(123); !ok || pid != 77 {
		t.Fatalf("thread 123: process %d, %v; want 77", pid, ok)
	}
	os.Remove(status)
	procs.ForgetUnlisted() // 123 was listed: kept
	if pid, ok := procs.Of(123); !ok || pid != 77 {
		t.Errorf("thread 123, listed again: process %d, %v; want 77 without reading its status", pid, ok)
	}
	procs.ForgetUnlisted()
	procs.ForgetUnlisted() // a listing without 123
	if pid, ok := procs.Of(123); ok {
		t.Errorf("thread 123, left out of a listing and gone: still process %d", pid)
	}
}

func mustThreadProcs(t *testing.T, proc string) *ThreadProcs {
	t.Helper()
	tp, err := NewThreadProcs(proc)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}
