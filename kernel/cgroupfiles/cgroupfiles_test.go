package cgroupfiles

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// spinner starts a shell's busy loop in cgroup v2 directory dir ("": the
// test's own), on CPU cpu from its birth (-1: anywhere).
func spinner(t *testing.T, dir string, cpu int) *exec.Cmd {
	t.Helper()
	return testenv.StartOn(t, dir, cpu, nil, "sh", "-c", "while :; do :; done")
}

// Two busy loops of one cgroup on one CPU: at every moment at least one
// of them is runnable and not running, so the cgroup's cpu.pressure
// "some" total grows with the wall clock (within 5%, over half a second),
// whatever else the machine runs on that CPU.
func TestPressureOfTwoOnOneCPU(t *testing.T) {
	_, dirs := testenv.Cgroups(t, "pair")
	_, err := os.Stat(filepath.Join(dirs[0], "cpu.pressure"))
	testenv.Require(t, err == nil, fmt.Sprintf("needs PSI in cgroup v2 (a kernel with CONFIG_PSI, not psi=0): %v", err))
	a, b := spinner(t, dirs[0], 0), spinner(t, dirs[0], 0)
	time.Sleep(50 * time.Millisecond)
	p0, err := Pressure(dirs[0], "cpu")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(500 * time.Millisecond)
	p1, err := Pressure(dirs[0], "cpu")
	wall := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	a.Process.Kill()
	b.Process.Kill()
	stalled := time.Duration(p1.Some.TotalNs - p0.Some.TotalNs)
	t.Logf("stalled %v of %v", stalled, wall)
	if r := float64(stalled) / float64(wall); r < 0.95 || r > 1.05 {
		t.Errorf("cpu.pressure some grew %v over %v of wall time", stalled, wall)
	}
	for _, res := range Resources {
		if _, err := Pressure(dirs[0], res); err != nil {
			t.Errorf("%s.pressure: %v", res, err)
		}
	}
}

// A busy loop under a CFS quota of 10 ms per 100 ms period, for some 550
// ms: cpu.stat counts the periods that passed (5 to 7, by hand), throttled
// every one but perhaps the first, each for at most the 90 ms beyond its
// quota (less where the loop got its 10 ms late, on a busy machine); the
// loop's own CPU time since it was moved in (its schedstat) kept to the
// quota of those periods.
// The quota is set in cgroup v2 (cpu.max) where v2 holds the cpu
// controller, else in v1's cpu hierarchy, whose cpu.stat names the time in
// ns.
func TestThrottlingUnderAQuota(t *testing.T) {
	testenv.RequireRoot(t)
	dir := quotaCgroup(t, 10_000, 100_000)
	c0, err := CPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := spinner(t, "", -1)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	ran0 := runTime(t, cmd.Process.Pid)
	time.Sleep(550 * time.Millisecond)
	c1, err := CPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	ran := runTime(t, cmd.Process.Pid) - ran0
	cmd.Process.Kill()
	cmd.Wait()
	periods, throttled := c1.Periods-c0.Periods, c1.Throttled-c0.Throttled
	ms := float64(c1.ThrottledNs-c0.ThrottledNs) / 1e6
	t.Logf("%d periods, %d throttled, %.1f ms throttled; the loop ran %v", periods, throttled, ms, ran)
	if periods < 5 || periods > 7 || throttled+1 < periods || ms <= 0 || ms > 90*float64(throttled)*1.05 {
		t.Errorf("%d periods, %d throttled for %.1f ms: want 5-7, all but perhaps one throttled, at most 90 ms each", periods, throttled, ms)
	}
	// Each period's quota, overrun by up to a tick (4 ms at HZ 250) before
	// the throttle takes hold, and the period it was moved in.
	if limit := time.Duration(periods+1) * 14 * time.Millisecond; ran > limit {
		t.Errorf("the loop ran %v in %d periods of a 10 ms quota", ran, periods)
	}
}

// runTime is pid's CPU time (its schedstat's first field).
func runTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Schedstat()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(s.RunningNanoseconds)
}

// quotaCgroup makes a cgroup with a CFS quota of quota µs per period µs,
// in v2 where it holds the cpu controller, else in v1's cpu hierarchy.
func quotaCgroup(t *testing.T, quota, period int) string {
	t.Helper()
	mnt := testenv.Cgroup2Mount()
	if ctl, err := os.ReadFile(filepath.Join(mnt, "cgroup.controllers")); err == nil && strings.Contains(" "+string(ctl)+" ", " cpu ") {
		top, dirs := testenv.Cgroups(t, "quota")
		if err := os.WriteFile(filepath.Join(mnt, top, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirs[0], "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0); err != nil {
			t.Fatal(err)
		}
		return dirs[0]
	}
	v1 := "/sys/fs/cgroup/cpu"
	_, err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us"))
	testenv.Require(t, err == nil, fmt.Sprintf("needs the cpu controller, in cgroup v2 (%s/cgroup.controllers) or a v1 hierarchy at %s", mnt, v1))
	testenv.LockMachine(t, false)
	dir := filepath.Join(v1, fmt.Sprintf("pmu_exporter_test_%d_%s", os.Getpid(), t.Name()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	for name, v := range map[string]int{"cpu.cfs_period_us": period, "cpu.cfs_quota_us": quota} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(v)), 0); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A link planted where a cgroup file should be is not followed.
func TestLinkRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/proc/self/status", filepath.Join(dir, "cpu.stat")); err != nil {
		t.Fatal(err)
	}
	if _, err := CPU(dir); err == nil {
		t.Error("cpu.stat, a link: read")
	}
}
