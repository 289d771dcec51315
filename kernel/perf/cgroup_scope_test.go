package perf_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// The cgroup-scoped test is outside package perf so that it can measure
// in hotplugtest, which opens its events through this package. Its helper
// process is group_test.go's TestMain (one test binary).

// TestCgroupScopedBusyLoop scopes the group to a fresh cgroup holding one busy
// process and compares cpu-clock and task-clock, summed over CPUs, with the
// kernel's CPU accounting for that cgroup (cpu.stat usage_usec) and process (rusage).
func TestCgroupScopedBusyLoop(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockMachine(t, false)
	mnt := testenv.Cgroup2Mount()
	testenv.Require(t, mnt != "", "needs a cgroup v2 hierarchy")
	dir := filepath.Join(mnt, fmt.Sprintf("pmu_exporter_test_%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()

	const spin = 400 * time.Millisecond
	var steal0 time.Duration
	var wall, process, total, usage, cpuClock, taskClock time.Duration
	clocks := []eventspec.Attr{
		{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK},
		{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK},
	}
	// A CPU another process takes offline stops its groups: measure again.
	// cpu.stat's usage is cumulative, so each run takes its own difference.
	hotplugtest.Measure(t, func(int) {
		usage0 := testenv.CgroupUsage(t, dir)
		var groups []*perf.Group
		for _, c := range testenv.OnlineCPUs(t) {
			g, err := perf.OpenGroup(clocks, []string{"cpu-clock", "task-clock"}, perf.Target{CPU: c, CgroupFD: int(cg.Fd())})
			if errors.Is(err, unix.ENODEV) {
				continue // offline since the list: hotplugtest.Measure measures again
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			groups = append(groups, g)
		}
		var start time.Time
		steal0, start = testenv.Stolen(t), time.Now()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "PERF_TEST_HELPER=spin", "PERF_TEST_SPIN="+spin.String())
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout strings.Builder
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			cmd.Process.Kill()
			t.Fatal(err)
		}
		stdin.Write([]byte{1})
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		wall = time.Since(start)
		spun, err := strconv.ParseInt(stdout.String(), 10, 64)
		if err != nil {
			t.Fatalf("helper output %q: %v", stdout.String(), err)
		}
		process = time.Duration(spun)
		// All its CPU time, the Go runtime's start and exit included, some of
		// it before it joined the cgroup (rusage).
		total = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		usage = testenv.CgroupUsage(t, dir) - usage0

		cpuClock, taskClock = 0, 0
		vals := make([]uint64, 2)
		for _, g := range groups {
			if _, _, err := g.Read(vals); errors.Is(err, perf.ErrGroupBroken) {
				return // its CPU went offline: Measure runs again
			} else if err != nil {
				t.Fatal(err)
			}
			cpuClock += time.Duration(vals[0])
			taskClock += time.Duration(vals[1])
		}
	})
	// perf's clocks run on while the hypervisor steals the CPU and through
	// part of each switch, cpu.stat's does not (testenv.ClockCeiling).
	steal := testenv.StolenSince(t, steal0)
	t.Logf("cgroup usage %v, process CPU time spinning %v and in all %v, cpu-clock %v, task-clock %v, up to %v stolen, wall %v", usage, process, total, cpuClock, taskClock, steal, wall)
	for name, got := range map[string]time.Duration{"cpu-clock": cpuClock, "task-clock": taskClock} {
		if got < usage*97/100 || float64(got) > testenv.ClockCeiling(t, float64(usage), steal0, 0, wall) {
			t.Errorf("%s %v differs from the cgroup's usage %v by more than 3%% (and what was stolen, or the wall time %v)", name, got, usage, wall)
		}
		// The spin is most, but not all, of the time in the cgroup: the
		// runtime's exit follows it (a fifth of it on an emulated CPU).
		if got < process*97/100 || got > total*103/100+steal {
			t.Errorf("%s %v is not between 97%% of the process's spinning CPU time %v and its whole CPU time %v (plus 3%% and what was stolen)", name, got, process, total)
		}
	}
	if process < spin {
		t.Errorf("the helper used %v of CPU, less than the %v it was told to spin", process, spin)
	}
}
