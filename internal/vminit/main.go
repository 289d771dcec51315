// Command vminit is /init in the emulated arm64 machine that
// scripts/arm64-vm boots: the exporter's kernel paths have no other arm64
// Linux to run on here. It mounts what the tests need (proc, sys, cgroup v2,
// debugfs, tracefs, bpffs, a tmpfs), runs /run.sh with busybox's sh,
// prints "vminit: exit N" with the script's status for the host to read
// from the console, and powers the machine off.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	for _, m := range []struct{ src, dir, fs string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2"},
		{"debugfs", "/sys/kernel/debug", "debugfs"},
		{"tracefs", "/sys/kernel/tracing", "tracefs"},
		{"bpf", "/sys/fs/bpf", "bpf"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			fmt.Println("vminit:", err)
		}
		if err := syscall.Mount(m.src, m.dir, m.fs, 0, ""); err != nil {
			fmt.Printf("vminit: mount %s on %s: %v\n", m.fs, m.dir, err)
		}
	}
	// Enable the root's controllers in its children, as systemd does: until
	// cgroup.subtree_control is first written, a new cgroup has no css of
	// the controllers v2 enables implicitly, perf_event's among them, and
	// perf_event_open on it fails with ENOENT.
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+"+c), 0); err != nil {
				fmt.Printf("vminit: enabling %s: %v\n", c, err)
			}
		}
	}
	if err := loopbackUp(); err != nil {
		fmt.Println("vminit: loopback:", err)
	}
	os.Setenv("PATH", "/bin")
	os.Setenv("HOME", "/tmp")
	os.Setenv("TMPDIR", "/tmp")
	cmd := exec.Command("/bin/sh", "/run.sh")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	code := 0
	if err := cmd.Run(); err != nil {
		code = 1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		fmt.Println("vminit:", err)
	}
	fmt.Printf("vminit: exit %d\n", code)
	syscall.Sync()
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Println("vminit: power off:", err)
	}
}

// loopbackUp brings lo up: the tests talk to the exporter over 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
