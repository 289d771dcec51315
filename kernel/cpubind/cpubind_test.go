package cpubind

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/host"
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

// Allowed agrees with the kernel's own account of the calling thread's
// affinity, its /proc/<tid>/status Cpus_allowed_list (the thread's: another
// test may have narrowed the process's other threads), read just before
// and just after it: another process's CPU hotplug may change the affinity
// between two reads, never during both gaps at once.
func TestAllowedMatchesProcStatus(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	status := func() []int {
		t.Helper()
		p, err := fs.Proc(unix.Gettid())
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.NewStatus()
		if err != nil {
			t.Fatal(err)
		}
		var cpus []int
		for _, c := range st.CpusAllowedList {
			cpus = append(cpus, int(c))
		}
		return cpus
	}
	for range 5 {
		before := status()
		got, err := Allowed()
		after := status()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, before) || slices.Equal(got, after) {
			return
		}
		t.Logf("Allowed() = %v between %v and %v: the affinity changed meanwhile; again", got, before, after)
	}
	t.Error("Allowed() never matched the thread's status in 5 tries")
}
