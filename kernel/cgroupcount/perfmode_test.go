package cgroupcount

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
)

// TestPerfMode counts two allow-listed cgroups in perf's cgroup mode: the
// busy one's cpu-clock matches its cpu.stat (the kernel's own cgroup time,
// with no switch missed; perf's clock also runs while the hypervisor
// steals the CPU and through part of each switch: testenv.ClockCeiling),
// the parent includes it, and the fd cost is cgroups x CPUs x events.
// The time counted is the burn's: the cgroups' cpu.stat since the first
// cycle.
func TestPerfMode(t *testing.T) {
	top, dirs := testenv.Cgroups(t, "pod", "pod/ctr")
	groups := []perfcount.GroupSpec{{Name: "software", Events: []eventspec.Event{
		sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK), sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK)}}}
	online := host.NewOnlineCPUsReader("/sys")
	defer online.Close()
	paths := []string{top + "/pod", top + "/pod/ctr"}
	// Measured again where another process's hotplug took a CPU away
	// meanwhile: a CPU back online is counted only from the next cycle.
	// Judged after the last run.
	var (
		s              Snapshot
		cpus           int
		usage, ceiling [2]float64
	)
	hotplugtest.Measure(t, func(int) {
		m, err := NewPerfMode(testenv.Cgroup2Mount(), paths, groups, perfcount.Options{OnlineCPUs: online.Read})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		m.Cycle()
		usage0 := [2]time.Duration{testenv.CgroupUsage(t, dirs[0]), testenv.CgroupUsage(t, dirs[1])}
		steal0, start := testenv.Stolen(t), time.Now()
		testenv.BurnIn(t, dirs[1], 500*time.Millisecond).Wait()
		wall := time.Since(start)
		m.Cycle()
		s = m.Snapshot()
		cpus = len(testenv.OnlineCPUs(t))
		for i := range dirs {
			usage[i] = float64(testenv.CgroupUsage(t, dirs[i]) - usage0[i])
			ceiling[i] = testenv.ClockCeiling(t, usage[i], steal0, 0, wall)
		}
	})
	if s.PerfModeFDs != 2*cpus*2 || s.Tracked != 2 {
		t.Errorf("fds %d (want 2 cgroups x %d CPUs x 2 events), tracked %d", s.PerfModeFDs, cpus, s.Tracked)
	}
	got := map[string]float64{}
	for _, c := range s.Cgroups {
		for _, e := range c.Events {
			if e.Event == "cpu-clock" {
				got[c.Path] = e.Value
			}
		}
	}
	for i, p := range paths {
		t.Logf("%s: perf cgroup mode %v, cpu.stat %v, ceiling %v", filepath.Base(p), time.Duration(got[p]), time.Duration(usage[i]), time.Duration(ceiling[i]))
		if got[p] < 0.97*usage[i] || got[p] > ceiling[i] {
			t.Errorf("%s: cpu-clock %v, cpu.stat %v, ceiling %v", p, time.Duration(got[p]), time.Duration(usage[i]), time.Duration(ceiling[i]))
		}
	}

	if _, err := NewPerfMode(testenv.Cgroup2Mount(), []string{top + "/missing"}, groups, perfcount.Options{OnlineCPUs: online.Read}); err == nil {
		t.Error("a missing allow-listed cgroup was accepted")
	}
}
