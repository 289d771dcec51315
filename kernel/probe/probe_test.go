package probe

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

func want(t *testing.T, r capability.Report, features map[string]bool) {
	t.Helper()
	for name, avail := range features {
		if f := r.Feature(name); f.Available != avail {
			t.Errorf("%s: available %v, want %v (%s; fix: %s)", name, f.Available, avail, f.Reason, f.Fix)
		}
	}
}

// TestThisHost runs the live probes. Expectations come from sources other than the
// probes: root can count system-wide, watchpoints fire where perf's mem: event
// counts (internal/hostgate), and a host whose sysfs lists no core PMU cannot
// have hardware counters.
func TestThisHost(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockMachine(t, false)
	f := host.Read("/proc", "/sys")
	pmus, err := pmu.Discover("/sys")
	if err != nil {
		t.Fatal(err)
	}
	r := capability.Build(f, pmus, host.ReadCounters(f.CPU.Vendor), Live(f))
	// Root on an x86-64 or arm64 Linux host can sample its own user
	// registers with cpu-clock (software, no PMU needed).
	decodes := runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64"
	// The kernel sends CPU uevents to the network namespaces of the
	// initial user namespace, which maps every id to itself.
	uidMap, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	initialUserNS := strings.Join(strings.Fields(string(uidMap)), " ") == "0 0 4294967295"
	want(t, r, map[string]bool{capability.SystemWide: true, capability.Breakpoints: testenv.HasFeature(t, hostgate.Watchpoints), capability.EBPF: true,
		capability.CgroupEvents: testenv.Cgroup2Mount() != "", capability.AddressSampling: decodes,
		capability.HotplugUevents: initialUserNS})
	hasCore := false
	for _, p := range pmus {
		hasCore = hasCore || p.IsCore()
	}
	if !hasCore && r.Feature(capability.HardwareCounters).Available {
		t.Error("hardware counters reported without a core PMU")
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/ibs_op"); (err == nil) != r.Feature(capability.IBS).Available {
		t.Error("ibs verdict disagrees with sysfs")
	}
	if !r.Runnable {
		t.Error("root on Linux must be able to run the exporter")
	}
	if errors.Join(f.Errors...) != nil {
		t.Errorf("host facts unreadable: %v", f.Errors)
	}
}

// A CPU that went offline after the online list was read (here taken
// offline by the test) does not make system-wide counting unavailable: the
// probe passes it over. A list of nothing but offline CPUs fails.
func TestSystemWideWithACPUGoneOffline(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	if err := os.WriteFile(ctl, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := systemWide([]int{0, cpu}); err != nil {
		t.Errorf("CPU %d offline: %v", cpu, err)
	}
	if err := systemWide([]int{cpu}); err == nil {
		t.Errorf("only the offline CPU %d: no error", cpu)
	}
}
