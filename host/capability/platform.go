package capability

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/platformpmu"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// The node-level features of the platform PMUs (plan/platform counts them).
const (
	// Energy: the power PMU (RAPL) counts joules by package and domain.
	Energy = "energy"
	// Frequency: the msr PMU counts aperf and mperf (effective frequency
	// and busy share per CPU); tsc alone gives neither.
	Frequency = "frequency"
	// CStates: the cstate_core or cstate_pkg PMU counts C-state residency.
	CStates = "cstates"
	// MemoryBandwidth: memory-controller PMUs count CAS commands (Intel
	// uncore_imc_*, AMD Zen 4 and later amd_umc_*) or bytes (NXP i.MX 8M
	// imx8_ddr*).
	MemoryBandwidth = "memory_bandwidth"
	// MemoryRequests: an Arm CMN mesh (arm_cmn_*) counts the requests its
	// home nodes send to the memory controllers, and their retries.
	MemoryRequests = "memory_requests"
	// NUMATraffic: Intel's LLC slices (uncore_cha_*) count their misses'
	// requests to local and remote memory, or AMD Zen 4's and Zen 5's
	// data fabric (amd_df) its DRAM's traffic for local and remote
	// processors.
	NUMATraffic = "numa_traffic"
	// UPITraffic: Intel's UPI links (uncore_upi_*) count the data flits
	// they send and receive between packages, or AMD's data fabric the
	// data its xGMI links send (Zen 4) or send and receive (Zen 5).
	UPITraffic = "upi_traffic"
)

// platformFeatures judges the platform PMUs from sysfs: present means the
// exporter counts them (pmu_node_*), absent says which PMU is missing and
// why it usually is.
func platformFeatures(byName map[string]*pmu.PMU, hypervisor bool, family string) []Feature {
	vm := ""
	if hypervisor {
		vm = "; the CPU reports a hypervisor, and hypervisors rarely pass it to guests"
	}
	var out []Feature
	if p := byName["power"]; p != nil && len(energyEvents(p)) > 0 {
		out = append(out, Feature{Name: Energy, Available: true, Detail: "power PMU: " + strings.Join(energyEvents(p), ", ")})
	} else {
		out = append(out, Feature{Name: Energy, Reason: "no power PMU (RAPL) in /sys/bus/event_source/devices" + vm,
			Fix: "on bare metal, the kernel's RAPL perf driver (CONFIG_PERF_EVENTS_INTEL_RAPL, which serves AMD too) exposes it"})
	}
	switch p := byName["msr"]; {
	case p == nil:
		out = append(out, Feature{Name: Frequency, Reason: "no msr PMU in /sys/bus/event_source/devices",
			Fix: "the kernel's msr perf driver (CONFIG_PERF_EVENTS_MSR) exposes it on x86"})
	case p.Aliases["aperf"].Name == "" || p.Aliases["mperf"].Name == "":
		out = append(out, Feature{Name: Frequency, Reason: "the msr PMU offers " + strings.Join(p.AliasNames(), ", ") + " but not aperf and mperf" + vm,
			Fix: "the msr PMU lists aperf and mperf where the CPU has them (CPUID APERFMPERF) and, in a VM, where the hypervisor passes them"})
	default:
		out = append(out, Feature{Name: Frequency, Available: true, Detail: "msr PMU: " + strings.Join(p.AliasNames(), ", ")})
	}
	var cstate []string
	for _, n := range []string{"cstate_core", "cstate_pkg"} {
		if byName[n] != nil {
			cstate = append(cstate, n)
		}
	}
	if len(cstate) > 0 {
		out = append(out, Feature{Name: CStates, Available: true, Detail: strings.Join(cstate, ", ")})
	} else {
		out = append(out, Feature{Name: CStates, Reason: "no cstate_core or cstate_pkg PMU" + vm,
			Fix: "the kernel's cstate perf driver (CONFIG_PERF_EVENTS_INTEL_CSTATE) exposes them on Intel CPUs it knows; AMD has none"})
	}
	var imcs, cmns []string
	for name, p := range byName {
		if (strings.HasPrefix(name, "uncore_imc_") && p.Aliases["cas_count_read"].Name != "") || strings.HasPrefix(name, "amd_umc_") || platformpmu.CountsDDR(p) {
			imcs = append(imcs, name)
		}
		if platformpmu.CountsMemoryRequests(p) {
			cmns = append(cmns, name)
		}
	}
	slices.Sort(imcs)
	slices.Sort(cmns)
	if len(imcs) > 0 {
		out = append(out, Feature{Name: MemoryBandwidth, Available: true, Detail: strings.Join(imcs, ", ")})
	} else {
		reason := "no memory-controller PMU (uncore_imc_* with cas_count_read, amd_umc_*, an i.MX 8M's imx8_ddr*)" + vm
		if len(cmns) > 0 {
			reason += "; the Arm CMN counts requests to the memory controllers, not bytes (memory_requests)"
		}
		out = append(out, Feature{Name: MemoryBandwidth, Reason: reason,
			Fix: "on bare metal the kernel's uncore driver exposes Intel's (CONFIG_PERF_EVENTS_INTEL_UNCORE) and, from Linux 6.10, AMD Zen 4's and later (amd_umc); on NXP i.MX 8M, CONFIG_FSL_IMX8_DDR_PMU"})
	}
	if len(cmns) > 0 {
		out = append(out, Feature{Name: MemoryRequests, Available: true, Detail: strings.Join(cmns, ", ") + " (hnf_mc_reqs, hnf_mc_retries)"})
	} else {
		out = append(out, Feature{Name: MemoryRequests, Reason: "no Arm CMN-600, CMN-650, CMN-700 or CI-700 PMU (arm_cmn_*) with hnf_mc_reqs" + vm,
			Fix: "Arm servers with a CMN mesh expose it on bare metal with the kernel's arm-cmn driver (CONFIG_ARM_CMN)"})
	}
	var chas int
	for name := range byName {
		if strings.HasPrefix(name, "uncore_cha_") {
			chas++
		}
	}
	df := byName["amd_df"]
	switch {
	case chas > 0:
		out = append(out, Feature{Name: NUMATraffic, Available: true, Detail: fmt.Sprintf("%d uncore_cha PMUs", chas)})
	case df != nil && platformpmu.CountsDRAM(df, family):
		out = append(out, Feature{Name: NUMATraffic, Available: true, Detail: "amd_df (the data fabric of CPU family " + family + ": DRAM traffic by requester)"})
	case df != nil:
		out = append(out, Feature{Name: NUMATraffic, Reason: "the amd_df PMU is not Zen 4's or Zen 5's PerfMonV2 data fabric (CPU family " + family + "): only their DRAM events are known here",
			Fix: "Zen 3's data fabric has other events and fewer counters"})
	default:
		out = append(out, Feature{Name: NUMATraffic, Reason: "no uncore_cha PMU (Intel Xeon's LLC slices) or amd_df (AMD's data fabric)" + vm,
			Fix: "Intel Xeon (Skylake-SP and later) or AMD Zen 4 or Zen 5 on bare metal, with the kernel's uncore driver"})
	}
	var upis []string
	for name := range byName {
		if strings.HasPrefix(name, "uncore_upi_") {
			upis = append(upis, name)
		}
	}
	slices.Sort(upis)
	switch {
	case len(upis) > 0:
		out = append(out, Feature{Name: UPITraffic, Available: true, Detail: strings.Join(upis, ", ")})
	case df != nil && platformpmu.CountsDRAM(df, family) && len(df.CPUMask) > 1:
		out = append(out, Feature{Name: UPITraffic, Available: true, Detail: fmt.Sprintf("amd_df xGMI links of %d packages", len(df.CPUMask))})
	default:
		out = append(out, Feature{Name: UPITraffic, Reason: "no uncore_upi PMU (Intel Xeon's links between packages), no Zen 4 or Zen 5 data fabric of several packages (AMD's xGMI links)" + vm,
			Fix: "a multi-socket Intel Xeon (Skylake-SP and later) or AMD Zen 4 or Zen 5 on bare metal, with the kernel's uncore driver"})
	}
	return out
}

// energyEvents are the power PMU's energy-* events.
func energyEvents(p *pmu.PMU) []string {
	return slices.DeleteFunc(p.AliasNames(), func(n string) bool { return !strings.HasPrefix(n, "energy-") })
}
