package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/kernel/probe"
)

// judge runs the exporter's probes (as check does) and the oracles.
func judge() (hostgate.Report, error) {
	facts := host.Read("/proc", "/sys")
	pmus, err := pmu.Discover("/sys")
	if err != nil {
		return hostgate.Report{}, err
	}
	rep := capability.Build(facts, pmus, host.ReadCounters(facts.CPU.Vendor), probe.Live(facts))
	uname, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	hv := ""
	if facts.CPU.Hypervisor {
		hv = ", a guest"
	}
	r := hostgate.Report{Host: fmt.Sprintf("%s (%s family %s model %s%s), %s, kernel %s, CPUs %v",
		facts.CPU.ModelName, facts.CPU.Vendor, facts.CPU.Family, facts.CPU.Model, hv, runtime.GOARCH,
		strings.TrimSpace(string(uname)), facts.OnlineCPUs)}
	tools := newTools()
	cpuid := tools.cpuid()
	add := func(feature string, p hostgate.Finding, o hostgate.Finding, conflict string) {
		r.Verdicts = append(r.Verdicts, hostgate.Verdict{Feature: feature, Probe: p, Oracle: o, Conflict: conflict})
	}
	add(hostgate.HardwareCounting, fromCapability(rep.Feature(capability.HardwareCounters)), tools.hardwareCounting(), "")
	add(hostgate.PreciseSampling, fromCapability(rep.Feature(capability.PreciseSampling)), tools.preciseSampling(), "")
	add(hostgate.Watchpoints, fromCapability(rep.Feature(capability.Breakpoints)), tools.watchpoints(), "")
	sys := sysfsCaches()
	oc := cpuidCaches(cpuid)
	add(hostgate.CacheTopology, sys.finding(), oc.finding(), cacheConflict(sys, oc))
	add(hostgate.SMT, sysfsSMT(), cpuidSMT(cpuid), "")
	add(hostgate.CPUHotplug, hotplugSwitch(facts.OnlineCPUs), hostgate.Finding{
		Proof: "sysfs's online switch is the kernel's only interface to hotplug: the hotplug tests prove it by toggling a CPU"}, "")
	if missing := tools.missing(); len(missing) > 0 && os.Getenv("PMU_EXPORTER_CI") != "" {
		return r, fmt.Errorf("PMU_EXPORTER_CI is set and the oracles %s are not installed (scripts/install-test-deps installs them)", strings.Join(missing, ", "))
	}
	return r, nil
}

// fromCapability is the exporter's verdict as check prints it.
func fromCapability(f capability.Feature) hostgate.Finding {
	if f.Available {
		return hostgate.Finding{Known: true, Present: true, Proof: "check: " + f.Detail}
	}
	return hostgate.Finding{Known: true, Proof: "check: " + f.Reason}
}

// sysfsSMT is the kernel's word, read as the exporter reads it.
func sysfsSMT() hostgate.Finding {
	on, err := host.SMTActive("/sys")
	if err != nil {
		// Kernels without CONFIG_HOTPLUG_SMT have no smt/ directory:
		// the sibling lists still tell.
		b, err2 := os.ReadFile("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
		if err2 != nil {
			return hostgate.Finding{Proof: fmt.Sprintf("%v; %v", err, err2)}
		}
		s := strings.TrimSpace(string(b))
		return hostgate.Finding{Known: true, Present: strings.ContainsAny(s, ",-"), Proof: "cpu0's thread siblings: " + s}
	}
	return hostgate.Finding{Known: true, Present: on, Proof: fmt.Sprintf("sysfs smt/active is %v", map[bool]int{false: 0, true: 1}[on])}
}

// hotplugSwitch: the last online CPU (x86's CPU 0 never has one) has an
// online switch, which the hotplug tests write.
func hotplugSwitch(online []int) hostgate.Finding {
	if len(online) < 2 {
		return hostgate.Finding{Known: true, Proof: fmt.Sprintf("CPUs %v online: one CPU cannot go offline", online)}
	}
	cpu := online[len(online)-1]
	ctl := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)
	if _, err := os.Stat(ctl); err != nil {
		return hostgate.Finding{Known: true, Proof: fmt.Sprintf("CPU %d has no online switch: %v", cpu, err)}
	}
	return hostgate.Finding{Known: true, Present: true, Proof: ctl + " exists"}
}
