package perf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// schedRuntime is the first field of a /proc schedstat file: the task's
// CPU time in ns, as the scheduler counts it.
func schedRuntime(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return time.Duration(ns), nil
}

func mustSchedRuntime(t *testing.T, path string) time.Duration {
	t.Helper()
	d, err := schedRuntime(path)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Another process's CPU clock is its one thread's scheduler count, to the
// nanosecond: a child that spun, then sleeps, read between two identical
// readings of its /proc/PID/schedstat. A pid that is no process is an
// error.
func TestProcessCPU(t *testing.T) {
	sh := testenv.RequireTool(t, "sh")
	cmd := exec.Command(sh, "-c", `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; exec sleep 30`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	stat := filepath.Join("/proc", strconv.Itoa(int(pid)), "stat")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err == nil && strings.Contains(string(b), "(sleep) S") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child never slept: %s", b)
		}
	}
	schedstat := filepath.Join("/proc", strconv.Itoa(int(pid)), "schedstat")
	for range 10 {
		before := mustSchedRuntime(t, schedstat)
		got, err := ProcessCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after := mustSchedRuntime(t, schedstat); after != before {
			continue // it woke in between
		}
		if got != before || got < 5*time.Millisecond {
			t.Errorf("process %d's CPU clock says %v, its schedstat %v", pid, got, before)
		}
		break
	}
	if _, err := ProcessCPU(uint32(testenv.ExitedThread(t))); err == nil {
		t.Error("the CPU clock of a thread that exited read without error")
	}
}

// A process's CPU clock keeps the time of its threads that exited, as
// the governor needs (a watched process's threads come and go): this
// process's clock covers its live threads' schedstat and a thread that
// spun for 30 ms of its own CPU time, then exited.
func TestProcessCPUKeepsExitedThreads(t *testing.T) {
	const burn = 30 * time.Millisecond
	testenv.ExitedThreadAfter(t, func() {
		var ts unix.Timespec
		for unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) == nil && time.Duration(ts.Nano()) < burn {
		}
	})
	tasks, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	var live time.Duration
	for _, f := range tasks {
		if d, err := schedRuntime(f); err == nil { // a thread may exit meanwhile
			live += d
		}
	}
	got, err := ProcessCPU(uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if got < live+burn {
		t.Errorf("this process's CPU clock says %v; its live threads ran %v and an exited one %v", got, live, burn)
	}
}
