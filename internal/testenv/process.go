package testenv

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Start runs argv, its output in the file log, until the test ends: then
// SIGTERM, and SIGKILL after 10 s.
func Start(t testing.TB, log string, argv ...string) {
	t.Helper()
	StartIn(t, "", log, argv...)
}

// StartIn is Start in the cgroup directory dir ("": the test's own).
func StartIn(t testing.TB, dir, log string, argv ...string) {
	t.Helper()
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if dir != "" {
		cg, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out.Close()
	})
}

// StartOn starts argv in the cgroup v2 directory dir ("": the test's own)
// on CPU cpu alone from its birth (-1: anywhere): the child inherits the
// CPUs of the thread that forks it, pinned meanwhile, so none of its time
// is spent elsewhere before it could pin itself. It is killed and waited
// for when the test ends.
func StartOn(t testing.TB, dir string, cpu int, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if dir != "" {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cpu >= 0 {
		var old, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			t.Fatal(err)
		}
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Fatal(err)
		}
		defer unix.SchedSetaffinity(0, &old)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}
