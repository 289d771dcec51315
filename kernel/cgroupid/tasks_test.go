package cgroupid

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
)

// The perf_event hierarchy among a process's cgroups (as procfs parses
// /proc/PID/cgroup): v2's line, or the v1 line listing perf_event.
func TestPerfEventPath(t *testing.T) {
	hybrid := []procfs.Cgroup{{HierarchyID: 12, Controllers: []string{"perf_event"}, Path: "/v1/a"},
		{HierarchyID: 4, Controllers: []string{"cpu", "cpuacct"}, Path: "/sys"}, {HierarchyID: 0, Path: "/kubepods/pod1/c1"}}
	for _, c := range []struct {
		cgs  []procfs.Cgroup
		v1   bool
		want string
	}{
		{hybrid, false, "/kubepods/pod1/c1"},
		{hybrid, true, "/v1/a"},
		{[]procfs.Cgroup{{HierarchyID: 3, Controllers: []string{"net_cls", "perf_event", "net_prio"}, Path: "/x"}}, true, "/x"},
		{[]procfs.Cgroup{{Path: "/"}}, false, "/"},
	} {
		got, err := perfEventPath(c.cgs, c.v1)
		if err != nil || got != c.want {
			t.Errorf("%+v (v1 %v): %q, %v; want %q", c.cgs, c.v1, got, err, c.want)
		}
	}
	for _, c := range []struct {
		cgs []procfs.Cgroup
		v1  bool
	}{
		{[]procfs.Cgroup{{HierarchyID: 4, Controllers: []string{"cpu"}, Path: "/a"}}, true},
		{[]procfs.Cgroup{{HierarchyID: 1, Controllers: []string{"name=systemd"}, Path: "/a"}}, false},
		{nil, false},
	} {
		if got, err := perfEventPath(c.cgs, c.v1); err == nil {
			t.Errorf("%+v (v1 %v): %q, no error", c.cgs, c.v1, got)
		}
	}
}

// cgroupSampled is the cgroup id the kernel puts in a sample of task pid
// (PERF_SAMPLE_CGROUP: its perf_event cgroup's).
func cgroupSampled(t *testing.T, pid int) uint64 {
	t.Helper()
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: 1_000_000, Sample_type: unix.PERF_SAMPLE_CGROUP, Wakeup: 1}
	fd, err := unix.PerfEventOpen(&attr, pid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatalf("perf_event_open(task-clock of %d, PERF_SAMPLE_CGROUP): %v", pid, err)
	}
	defer unix.Close(fd)
	r, err := perfring.Open(fd, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var id uint64
		r.Read(func(rec []byte) bool {
			if h, _ := perfrecord.ParseHeader(rec); h.Type == perfrecord.TypeSample {
				id = binary.LittleEndian.Uint64(rec[perfrecord.HeaderSize:])
			}
			return true
		})
		if id != 0 {
			return id
		}
	}
	t.Fatalf("no sample of task %d in 5 s", pid)
	return 0
}

// busyChild is the shell BurnIn's timeout runs: the task that burns.
func busyChild(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if f := strings.Fields(string(b)); len(f) > 0 {
			child, _ := strconv.Atoi(f[0])
			return child
		}
	}
	t.Fatalf("process %d started no child", pid)
	return 0
}

// A process's cgroup id is the one the kernel samples it with; a process
// moved to another cgroup keeps its old id until MaxAge has passed, then
// has the new one; an exited process has none once MaxAge has passed.
func TestTasksAsTheKernelSamples(t *testing.T) {
	testenv.Require(t, runtime.GOOS == "linux", "cgroups")
	_, dirs := testenv.Cgroups(t, "a", "b")
	burn := testenv.BurnIn(t, dirs[0], 20*time.Second)
	pid := busyChild(t, burn.Process.Pid)
	mnt := testenv.Cgroup2Mount()
	tasks, err := NewTasks("/proc", mnt, false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	tasks.now = func() time.Time { return now }

	want := cgroupSampled(t, pid)
	got, ok := tasks.ID(uint32(pid))
	if !ok || got != want {
		t.Fatalf("task %d in %s: id %d (%v), the kernel samples it with %d", pid, dirs[0], got, ok, want)
	}
	if err := os.WriteFile(filepath.Join(dirs[1], "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	moved := cgroupSampled(t, pid)
	if moved == want {
		t.Fatalf("the kernel samples the moved task with its old cgroup's id %d", moved)
	}
	if got, _ := tasks.ID(uint32(pid)); got != want {
		t.Errorf("within MaxAge: id %d, want the kept %d", got, want)
	}
	now = now.Add(tasks.MaxAge)
	if got, ok := tasks.ID(uint32(pid)); !ok || got != moved {
		t.Errorf("after MaxAge: id %d (%v), the kernel samples it with %d", got, ok, moved)
	}
	unix.Kill(-burn.Process.Pid, unix.SIGKILL) // its process group: timeout and the shell
	burn.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			break
		}
	}
	now = now.Add(tasks.MaxAge)
	if id, ok := tasks.ID(uint32(pid)); ok {
		t.Errorf("an exited process: id %d", id)
	}
}
