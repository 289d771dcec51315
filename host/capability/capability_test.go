package capability

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/model"
)

func ok() error { return nil }

// x86Fixture: the test's judgement rests on an x86 /proc/cpuinfo (the
// vendor, the hypervisor flag), which procfs parses only in an x86 build:
// it picks its cpuinfo parser by GOARCH.
func x86Fixture(t *testing.T) {
	t.Helper()
	testenv.Require(t, runtime.GOARCH == "amd64", "an x86 cpuinfo fixture, parsed by procfs only in an x86-64 build")
}

// allWork are the probe results of a bare-metal host run as root.
var allWork = Probes{Hardware: ok, SystemWide: ok, Breakpoint: ok, EBPF: ok, Cgroup: ok, AddressSampling: ok}

func report(t *testing.T, h fixture.Host, p Probes) Report {
	t.Helper()
	sys, proc := fixture.Write(t, h)
	pmus, err := pmu.Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	return Build(host.Read(proc, sys), pmus, host.Counters{}, p)
}

func want(t *testing.T, r Report, features map[string]bool) {
	t.Helper()
	for name, avail := range features {
		f := r.Feature(name)
		if f.Available != avail {
			t.Errorf("%s: available=%v (%s%s), want %v", name, f.Available, f.Detail, f.Reason, avail)
		}
		if !f.Available && (f.Reason == "" || f.Fix == "") {
			t.Errorf("%s is unavailable without a reason and a fix: %+v", name, f)
		}
	}
}

func TestIntelIcelake(t *testing.T) {
	x86Fixture(t)
	r := report(t, fixture.IntelIcelake(), allWork)
	want(t, r, map[string]bool{HardwareCounters: true, PreciseSampling: true, PerfMetrics: true, IBS: false, SPE: false,
		Breakpoints: true, EBPF: true, CgroupEvents: true, SystemWide: true})
	if !strings.Contains(r.Feature(PreciseSampling).Detail, "PEBS on cpu (max_precise=3)") || r.CorePMU != "icelake" {
		t.Errorf("detail %q, core %q", r.Feature(PreciseSampling).Detail, r.CorePMU)
	}
}

func TestIntelSkylakeHasNoPerfMetrics(t *testing.T) {
	x86Fixture(t)
	r := report(t, fixture.IntelSkylake(), allWork)
	want(t, r, map[string]bool{HardwareCounters: true, PreciseSampling: true, PerfMetrics: false})
}

func TestHybridPerfMetricsOnCoreOnly(t *testing.T) {
	r := report(t, fixture.IntelAlderLake(), allWork)
	want(t, r, map[string]bool{PerfMetrics: true})
	if d := r.Feature(PerfMetrics).Detail; !strings.Contains(d, "cpu_core") {
		t.Errorf("perf_metrics detail %q should name cpu_core", d)
	}
	if d := r.Feature(HardwareCounters).Detail; !strings.Contains(d, "cpu_atom, cpu_core") {
		t.Errorf("hardware detail %q should list both core PMUs", d)
	}
}

func TestAMDAndArm(t *testing.T) {
	r := report(t, fixture.AMDZen3(), allWork)
	want(t, r, map[string]bool{PreciseSampling: true, IBS: true, SPE: false, PerfMetrics: false})
	r = report(t, fixture.ArmNeoverseN1(), allWork)
	want(t, r, map[string]bool{PreciseSampling: true, IBS: false, SPE: true, HardwareCounters: true})
}

// TestVMWithoutPMU: the probes fail the way this project's CI VM fails them.
func TestVMWithoutPMU(t *testing.T) {
	x86Fixture(t)
	p := allWork
	p.Hardware = func() error {
		return &model.OpenError{Event: "probe", Err: unix.ENOENT, Reason: model.ReasonUnsupported}
	}
	r := report(t, fixture.NoPMU(), p)
	want(t, r, map[string]bool{HardwareCounters: false, PreciseSampling: false, SystemWide: true, Breakpoints: true, AddressSampling: true})
	if hw := r.Feature(HardwareCounters); !strings.Contains(hw.Reason, "this VM does not expose a PMU") {
		t.Errorf("reason %q", hw.Reason)
	}
	if !r.Runnable {
		t.Error("a VM without PMU can still run the exporter on software events")
	}
}

// A pod in a user namespace of its own hears no CPU uevents: the report
// says so, with the fix, and the exporter still runs.
func TestHotplugUeventsUnheard(t *testing.T) {
	x86Fixture(t)
	p := allWork
	p.HotplugUevents = func() error {
		return errors.New("uevent socket: this network namespace belongs to a user namespace other than the initial one")
	}
	r := report(t, fixture.NoPMU(), p)
	want(t, r, map[string]bool{HotplugUevents: false, SystemWide: true})
	if f := r.Feature(HotplugUevents); !strings.Contains(f.Fix, "hostUsers: true") || !strings.Contains(f.Reason, "user namespace") {
		t.Errorf("cpu_hotplug_uevents: reason %q, fix %q", f.Reason, f.Fix)
	}
	if !r.Runnable {
		t.Error("without uevents the exporter still runs")
	}
	p.HotplugUevents = ok
	want(t, report(t, fixture.NoPMU(), p), map[string]bool{HotplugUevents: true})
}

func TestUnprivileged(t *testing.T) {
	denied := func() error {
		return &model.OpenError{Event: "probe", Err: unix.EACCES, Reason: model.ReasonPermission}
	}
	// This thread's own samples carry its registers (paranoid 2 allows
	// it), but the address sampler samples every CPU: not available.
	p := Probes{Hardware: ok, SystemWide: denied, Breakpoint: ok, EBPF: func() error { return unix.EPERM }, Cgroup: denied, AddressSampling: ok}
	r := report(t, fixture.IntelSkylake(), p)
	want(t, r, map[string]bool{SystemWide: false, EBPF: false, CgroupEvents: false, HardwareCounters: true, AddressSampling: false})
	if f := r.Feature(AddressSampling); !strings.Contains(f.Reason, "samples every CPU") || !strings.Contains(f.Fix, "CAP_PERFMON") {
		t.Errorf("address sampling: reason %q, fix %q", f.Reason, f.Fix)
	}
	if r.Runnable {
		t.Error("runnable without system-wide counting")
	}
	if fix := r.Feature(SystemWide).Fix; !strings.Contains(fix, "perf_event_paranoid is 2") || !strings.Contains(fix, "CAP_PERFMON") {
		t.Errorf("fix = %q", fix)
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	for _, s := range []string{"[no]  system_wide", "fix: perf_event_paranoid is 2", "[yes] hardware_counters", "cannot count anything"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, buf.String())
		}
	}
}

// A watchpoint that opens but does not fire (a hypervisor without debug
// registers) is no breakpoints, with the reason and what to do.
func TestBreakpointsThatDoNotFire(t *testing.T) {
	p := allWork
	p.Breakpoint = func() error {
		return fmt.Errorf("%w: a write watchpoint opened but counted 0 of 1000 writes", ErrNotInHardware)
	}
	r := report(t, fixture.NoPMU(), p)
	bp := r.Feature(Breakpoints)
	// The kernel supports them: the reason does not blame it (issue 57).
	if bp.Available || !strings.Contains(bp.Reason, "0 of 1000") || !strings.Contains(bp.Fix, "debug registers") || strings.Contains(bp.Reason, "kernel") {
		t.Errorf("%+v", bp)
	}
}

// The platform PMUs: an Intel server's power, msr (with aperf and mperf)
// and cstate PMUs give energy, frequency and C-states; AMD's energy,
// frequency and (Zen 4's data fabric) NUMA traffic but no C-states; this project's VM only msr/tsc, so none,
// each with the PMU that is missing and why.
func TestPlatformFeatures(t *testing.T) {
	want(t, report(t, fixture.IntelPlatform(), allWork), map[string]bool{Energy: true, Frequency: true, CStates: true, MemoryBandwidth: true, NUMATraffic: true, UPITraffic: true})
	want(t, report(t, fixture.AMDPlatform(), allWork), map[string]bool{Energy: true, Frequency: true, CStates: false, MemoryBandwidth: true, NUMATraffic: true, UPITraffic: false})
	// Zen 3's data fabric (the event14 format): its DRAM events are not
	// Zen 4's, so no NUMA traffic, and check says why.
	// Two packages' data fabric: their xGMI links are counted.
	twoPackages := fixture.Merge(fixture.AMDPlatform(), fixture.Host{"sys/bus/event_source/devices/amd_df/cpumask": "0,2\n"})
	want(t, report(t, twoPackages, allWork), map[string]bool{NUMATraffic: true, UPITraffic: true})
	zen3DF := fixture.Merge(fixture.AMDPlatform(), fixture.Host{"sys/bus/event_source/devices/amd_df/format/event": "config:0-7,32-35,59-60\n"})
	if f := report(t, zen3DF, allWork).Feature(NUMATraffic); f.Available || !strings.Contains(f.Reason, "not Zen 4's or Zen 5's PerfMonV2 data fabric") {
		t.Errorf("numa_traffic on Zen 3's data fabric: %+v", f)
	}
	want(t, report(t, fixture.AMDZen3(), allWork), map[string]bool{MemoryBandwidth: false, MemoryRequests: false})
	// An Arm server's CMN mesh counts requests to the memory controllers,
	// not bytes, and check says so; an i.MX 8M's DDR controller counts
	// bytes.
	cmn := report(t, fixture.ArmCMNPlatform(), allWork)
	want(t, cmn, map[string]bool{MemoryBandwidth: false, MemoryRequests: true})
	if f := cmn.Feature(MemoryBandwidth); !strings.Contains(f.Reason, "the Arm CMN counts requests to the memory controllers, not bytes") {
		t.Errorf("memory_bandwidth beside a CMN: %+v", f)
	}
	want(t, report(t, fixture.IMX8MPlatform("i.MX8MM"), allWork), map[string]bool{MemoryBandwidth: true, MemoryRequests: false})
	r := report(t, fixture.NoPMU(), allWork)
	want(t, r, map[string]bool{Energy: false, Frequency: false, CStates: false, MemoryBandwidth: false})
	if f := r.Feature(Frequency); !strings.Contains(f.Reason, "offers tsc but not aperf and mperf") {
		t.Errorf("frequency on a VM's msr/tsc: %q", f.Reason)
	}
	if f := r.Feature(Energy); !strings.Contains(f.Reason, "no power PMU") {
		t.Errorf("energy without RAPL: %q", f.Reason)
	}
}

// code_reads follows CAP_SYS_PTRACE in the effective set and Yama's
// ptrace_scope: what the kernel checks before /proc/PID/mem of another
// user's process is read.
func TestCodeReads(t *testing.T) {
	for _, c := range []struct {
		name  string
		facts host.Facts
		avail bool
		says  string
	}{
		{"with CAP_SYS_PTRACE", host.Facts{CapKnown: true, CapEff: 1 << host.CapSysPtrace, PtraceScope: 1}, true, ""},
		{"without", host.Facts{CapKnown: true, CapEff: 1<<host.CapPerfmon | 1<<host.CapBPF, PtraceScope: -1}, false, "no CAP_SYS_PTRACE"},
		{"ptrace_scope 3", host.Facts{CapKnown: true, CapEff: 1 << host.CapSysPtrace, PtraceScope: 3}, false, "ptrace_scope is 3"},
		{"unknown", host.Facts{}, false, "could not be read"},
	} {
		f := codeReadsFeature(c.facts)
		if f.Name != CodeReads || f.Available != c.avail || !strings.Contains(f.Reason, c.says) || (!f.Available && f.Fix == "") {
			t.Errorf("%s: %+v", c.name, f)
		}
	}
}
