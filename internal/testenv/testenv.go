// Package testenv states what a test needs from the machine. Outside CI an unmet
// need skips the test with the reason; under PMU_EXPORTER_CI=1 it fails, so CI can
// never pass by skipping what it was meant to run.
package testenv

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
)

// InCI reports whether PMU_EXPORTER_CI is set.
func InCI() bool { return os.Getenv("PMU_EXPORTER_CI") != "" }

// Require skips (or, in CI, fails) the test unless ok.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("PMU_EXPORTER_CI is set, so this must run here: %s", why)
	}
	t.Skipf("%s (set PMU_EXPORTER_CI=1 to make this a failure)", why)
}

// RequireRoot needs uid 0.
func RequireRoot(t testing.TB) { t.Helper(); Require(t, os.Geteuid() == 0, "needs root") }

// RequireTool needs an executable on PATH and returns its path.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Require(t, err == nil, name+" is not installed (.ci/run installs it)")
	return p
}

// OwnCgroup is the cgroup v2 directory this process is in.
func OwnCgroup(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(Cgroup2Mount(), rest)
		}
	}
	tb.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}

// BPFStatsKnob is the sysctl that makes the kernel account BPF programs'
// run time (node-wide; it slows every BPF program while on).
const BPFStatsKnob = "/proc/sys/kernel/bpf_stats_enabled"

// EnableBPFStats turns the kernel's BPF run-time accounting on until the
// test ends, then sets it back to what it was.
func EnableBPFStats(tb testing.TB) {
	tb.Helper()
	old, err := os.ReadFile(BPFStatsKnob)
	if err != nil {
		tb.Fatalf("the kernel's bpf_stats: %v", err)
	}
	if err := os.WriteFile(BPFStatsKnob, []byte("1"), 0); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.WriteFile(BPFStatsKnob, old, 0) })
}

// Cgroup2Mount returns where the cgroup v2 hierarchy is mounted, or "".
func Cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		if fields := strings.Fields(post); len(fields) > 0 && fields[0] == "cgroup2" {
			if pf := strings.Fields(pre); len(pf) > 4 {
				return pf[4]
			}
		}
	}
	return ""
}

// CgroupUsage is the CPU time the kernel accounts to a cgroup v2 directory
// (cpu.stat usage_usec): the independent expectation for attributed clocks.
func CgroupUsage(t testing.TB, dir string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s/cpu.stat: usage_usec %q: %v", dir, v, err)
			}
			return time.Duration(n) * time.Microsecond
		}
	}
	t.Fatalf("no usage_usec in %s/cpu.stat", dir)
	return 0
}

// OnlineCPUs lists this machine's online CPUs.
func OnlineCPUs(t testing.TB) []int { t.Helper(); return cpuList(t, "online") }

// PresentCPUs lists the present CPUs, online or not
// (/sys/devices/system/cpu/present).
func PresentCPUs(t testing.TB) []int { t.Helper(); return cpuList(t, "present") }

// cpuList reads a CPU list of /sys/devices/system/cpu (online, present).
func cpuList(t testing.TB, name string) []int {
	t.Helper()
	p := "/sys/devices/system/cpu/" + name
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := cpuset.Parse(string(b))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return cpus
}

// Cgroups makes the cgroup v2 directories rels (relative paths, parents
// first) under a test-owned directory of the v2 mount and removes them, deepest
// first, when the test ends. It returns that directory's path relative to the
// mount (with a leading slash, as /proc/<pid>/cgroup writes it) and the
// absolute paths of rels.
func Cgroups(t testing.TB, rels ...string) (top string, dirs []string) {
	t.Helper()
	RequireRoot(t)
	LockMachine(t, false)
	return CgroupsHeld(t, rels...)
}

// CgroupsHeld is Cgroups for a test that holds the machine exclusively
// already (HotplugCPU): taking the lock shared again would wait on itself.
func CgroupsHeld(t testing.TB, rels ...string) (top string, dirs []string) {
	t.Helper()
	mnt := Cgroup2Mount()
	Require(t, mnt != "", "needs a cgroup v2 hierarchy")
	top = fmt.Sprintf("/pmu_exporter_test_%d_%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
	all := []string{filepath.Join(mnt, top)}
	for _, r := range rels {
		all = append(all, filepath.Join(mnt, top, r))
	}
	for _, d := range all {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := len(all) - 1; i >= 0; i-- {
			os.Remove(all[i])
		}
	})
	return top, all[1:]
}

// BurnIn starts a shell loop burning CPU for about d directly inside the
// cgroup v2 directory dir (clone3 with CLONE_INTO_CGROUP, so none of its time
// is spent elsewhere); Wait on the command to let it finish.
func BurnIn(t testing.TB, dir string, d time.Duration) *exec.Cmd {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("timeout", strconv.FormatFloat(d.Seconds(), 'f', 3, 64), "sh", "-c", "while :; do :; done")
	// Its own process group, killed whole when the test ends: killing
	// timeout alone (Process.Kill) would leave the shell spinning forever.
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return cmd
}

// LockMachine holds, until the test ends, a lock shared by every test process
// on this machine. Tests that change machine-wide state for a while hold it
// exclusively: CPU hotplug, binding the perf_event controller to a cgroup v1
// hierarchy (PerfEventV1). Tests whose exact expectations that would break
// hold it shared: those comparing per-cgroup counts with the kernel's
// accounting (a CPU going offline loses its span since the last switch) or
// needing perf_event on cgroup v2 (cgroup-switches, PERF_FLAG_PID_CGROUP).
func LockMachine(t testing.TB, exclusive bool) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "pmu_exporter_tests.machine.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", f.Name(), err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// perfEventHierarchy is the perf_event line of /proc/cgroups: the hierarchy id
// (0: cgroup v2) and the number of cgroups in it.
func perfEventHierarchy(t testing.TB) (id, cgroups int) {
	t.Helper()
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "perf_event" {
			id, _ = strconv.Atoi(f[1])
			cgroups, _ = strconv.Atoi(f[2])
			return id, cgroups
		}
	}
	t.Fatal("/proc/cgroups has no perf_event controller")
	return 0, 0
}

// PerfEventV1 mounts a cgroup v1 hierarchy with the perf_event controller,
// which moves the controller off cgroup v2 machine-wide, makes the cgroups rels
// (relative paths, parents first) in it, and returns the mount point and their
// absolute paths. Other tests that need the controller on v2 wait
// (LockMachine). When the test ends (its workloads must have exited) it
// removes the cgroups, unmounts the hierarchy and waits until the controller
// is back on v2: a hierarchy unmounted while a removed cgroup is still dying
// would stay, and keep the controller.
func PerfEventV1(t testing.TB, rels ...string) (mnt string, dirs []string) {
	t.Helper()
	RequireRoot(t)
	LockMachine(t, true)
	if id, _ := perfEventHierarchy(t); id != 0 {
		t.Fatalf("perf_event is already on cgroup v1 hierarchy %d", id)
	}
	mnt = t.TempDir()
	err := syscall.Mount("cgroup", mnt, "cgroup", 0, "perf_event")
	Require(t, err == nil, fmt.Sprintf("mount a cgroup v1 perf_event hierarchy: %v", err))
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				t.Error(err)
			}
		}
		wait := func(what string, done func() bool) {
			for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("perf_event v1 hierarchy: %s within 10 s", what)
					return
				}
			}
		}
		wait("removed cgroups gone", func() bool { _, n := perfEventHierarchy(t); return n <= 1 })
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
		wait("controller back on v2", func() bool { id, _ := perfEventHierarchy(t); return id == 0 })
	})
	for _, r := range rels {
		d := filepath.Join(mnt, r)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	return mnt, dirs
}

// InCgroupV1 is a command that runs name with args inside the cgroup v1
// directory dir. v1 has no CLONE_INTO_CGROUP: a shell moves itself there and
// execs, so only the shell's start runs outside the cgroup.
func InCgroupV1(dir, name string, args ...string) *exec.Cmd {
	return exec.Command("sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, dir, name}, args...)...)
}

// FreeAddr returns a loopback address with a port no one listens on now, for
// a server the test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// HotplugCPU holds the machine exclusively (LockMachine) and returns the
// last online CPU and its sysfs online switch, which is set back to 1 when
// the test ends. It requires root and two CPUs, and is gated on CPU hotplug
// (internal/hostgate): the last online CPU has an online switch.
func HotplugCPU(t testing.TB) (cpu int, ctl string) {
	t.Helper()
	RequireRoot(t)
	LockMachine(t, true)
	AwaitPresentOnline(t, 5*time.Second) // not the CPU before one another process holds offline
	RequireFeature(t, hostgate.CPUHotplug)
	online := OnlineCPUs(t)
	Require(t, len(online) >= 2, "needs two CPUs")
	cpu = online[len(online)-1]
	ctl = fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)
	t.Cleanup(func() { os.WriteFile(ctl, []byte("1"), 0o644) })
	return cpu, ctl
}

// AwaitPresentOnline waits up to timeout until every present CPU is
// online (another process may hold one offline), and returns how many CPUs
// are present.
func AwaitPresentOnline(t testing.TB, timeout time.Duration) int {
	t.Helper()
	present := PresentCPUs(t)
	for deadline := time.Now().Add(timeout); len(OnlineCPUs(t)) < len(present) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return len(present)
}

// settle is how long EveryCPUOnline waits for a CPU whose tear-down had
// begun during its read to leave the online list.
const settle = 100 * time.Millisecond

// EveryCPUOnline calls read, which reads something of every CPU (sysfs
// topology, the online list), while every present CPU is online: after
// AwaitPresentOnline, and again (five times at most) where one went
// offline by the end of read (another process's hotplug), since sysfs
// leaves an offline CPU out of its siblings' lists.
func EveryCPUOnline(t testing.TB, read func()) {
	t.Helper()
	for try := 1; ; try++ {
		present := AwaitPresentOnline(t, 5*time.Second)
		before := len(OnlineCPUs(t))
		read()
		// A CPU going offline leaves its siblings' sysfs lists (its
		// caches' sharing lists) milliseconds before it leaves the online
		// list: CPU 0's L3 was read as CPU 0's alone with both CPUs
		// listed online (up to 6.6 ms of 20 tear-downs here). Such a CPU
		// is out of the list a moment later.
		time.Sleep(settle)
		if before == present && len(OnlineCPUs(t)) == present || try == 5 {
			return
		}
	}
}

// Stolen is the time the hypervisor ran something else on this VM's CPUs
// so far (/proc/stat's steal, all CPUs; 0 on bare metal). perf's clocks
// (cpu-clock, task-clock, the cgroup time of perf's cgroup mode) run on
// through it; the scheduler's (sum_exec_runtime: cpu.stat, the
// CLOCK_*_CPUTIME_ID clocks) do not where the kernel accounts steal
// (CONFIG_PARAVIRT_TIME_ACCOUNTING, as on this project's VMs).
func Stolen(t testing.TB) time.Duration {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	st, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(math.Round(st.CPUTotal.Steal * 1e9)) // seconds, in ticks of stealTick
}

// stealTick is /proc/stat's unit (USER_HZ 100).
const stealTick = 10 * time.Millisecond

// StolenSince is what was stolen since Stolen read from, plus a tick for
// the counter's resolution: how much further perf's clock of a task may
// have run meanwhile than the scheduler's, on steal alone.
func StolenSince(t testing.TB, from time.Duration) time.Duration {
	return Stolen(t) - from + stealTick
}

// ClockCeiling is the most perf's clock may count for a cgroup whose
// cpu.stat (or a process whose rusage) grew by usage while its workloads,
// a thread each, ran for wall in all: 3% over usage plus what /proc/stat says was stolen since steal0
// plus slack, or wall if that is more. perf's clock runs on through
// stolen time and through part of each context switch, which cpu.stat
// leaves out, and /proc/stat has not always shown the difference (CI: 32
// ms over 330 ms of cpu.stat with no steal, under load); but a thread
// cannot run longer than the wall clock.
func ClockCeiling(t testing.TB, usage float64, steal0, slack, wall time.Duration) float64 {
	t.Helper()
	return max(1.03*usage+float64(StolenSince(t, steal0)+slack), float64(wall))
}

// ExitedThread is the id a thread of this process had; the thread has
// exited (its /proc/self/task entry is gone).
func ExitedThread(t testing.TB) uint32 {
	t.Helper()
	return ExitedThreadAfter(t, func() {})
}

// ExitedThreadAfter runs f on a thread of its own, which then exits, and
// returns its id once its /proc/self/task entry is gone. f may run more
// than once: again on another thread where the runtime gave it the main
// thread, which never exits.
func ExitedThreadAfter(t testing.TB, f func()) uint32 {
	t.Helper()
	for range 10 {
		tids := make(chan uint32)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			f()
			tids <- uint32(syscall.Gettid())
		}()
		tid := <-tids
		if int(tid) == os.Getpid() {
			continue // the main thread never exits: the runtime wedges it instead
		}
		task := fmt.Sprintf("/proc/self/task/%d", tid)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := os.Stat(task); os.IsNotExist(err) {
				return tid
			}
		}
		t.Fatalf("thread %d has not exited after 5 s", tid)
	}
	t.Fatal("every locked goroutine ran on the main thread")
	return 0
}

// FreshPages maps n anonymous pages, each of which faults once when first
// touched: huge pages are refused for them, since where transparent huge
// pages are "always" (Debian's arm64 kernel) one fault maps 512 pages.
// They are unmapped when the test ends.
func FreshPages(t testing.TB, n int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, n*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil {
		t.Fatal(err)
	}
	return mem
}
