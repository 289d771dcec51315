package cpubind

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
)

// RunOn really moves the work: the kernel's own record of the CPU a thread last
// ran on (/proc/thread-self/stat, field 39) names the CPU asked for.
func TestRunOnBindsTheThread(t *testing.T) {
	online := host.NewOnlineCPUsReader("/sys")
	defer online.Close()
	// A CPU another process takes offline after the list is read refuses
	// the binding (EINVAL): measured again, judged after the last run.
	var failed []string
	hotplugtest.Measure(t, func(int) {
		failed = nil
		cpus, err := online.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, cpu := range cpus {
			var ran string
			var readErr error
			err := RunOn(cpu, func() {
				var b []byte
				if b, readErr = os.ReadFile("/proc/thread-self/stat"); readErr == nil {
					s := string(b)
					fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
					ran = fields[39-3]
				}
			})
			if err != nil || readErr != nil {
				failed = append(failed, fmt.Sprintf("RunOn(%d): %v %v", cpu, err, readErr))
				continue
			}
			if ran != strconv.Itoa(cpu) {
				failed = append(failed, fmt.Sprintf("RunOn(%d) ran on CPU %s", cpu, ran))
			}
			// A homogeneous host answers the same on every CPU.
			if c, err := CountersOn("AuthenticAMD", cpu); err != nil || c != host.ReadCounters("AuthenticAMD") {
				failed = append(failed, fmt.Sprintf("CountersOn(%d) = %+v, %v; ReadCounters = %+v", cpu, c, err, host.ReadCounters("AuthenticAMD")))
			}
		}
	})
	for _, f := range failed {
		t.Error(f)
	}
	if err := RunOn(4095, func() { t.Error("ran on a CPU this host does not have") }); err == nil || !strings.Contains(err.Error(), "CPU 4095") {
		t.Errorf("RunOn(4095) = %v", err)
	}
}

// Allowed agrees with the kernel's own account of this process's affinity,
// /proc/self/status's Cpus_allowed_list (every thread of a Go test process
// has the same affinity unless a test narrows its own).
func TestAllowedMatchesProcStatus(t *testing.T) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			if want, err = cpuset.Parse(strings.TrimSpace(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := Allowed()
	if err != nil || len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("Allowed() = %v, %v; /proc/self/status says %v", got, err, want)
	}
}
