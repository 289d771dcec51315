package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
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
