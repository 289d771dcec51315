package collector

import (
	"fmt"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/plan/platform"

	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/replay"
)

// softwareEvents are perf's names of the software events a perf stat
// recording may hold: counted on any host, with or without a PMU.
var softwareEvents = map[string]bool{"cpu-clock": true, "task-clock": true, "page-faults": true, "faults": true,
	"context-switches": true, "cs": true, "cpu-migrations": true, "migrations": true, "minor-faults": true,
	"major-faults": true, "alignment-faults": true, "emulation-faults": true, "dummy": true, "duration_time": true,
	"cgroup-switches": true, "user_time": true, "system_time": true}

// recordedFeatures are the capabilities the recordings show the recording
// host had: hardware counters where a hardware event counted, the
// PERF_METRICS slots where perf counted them, cgroup events with perf
// stat -G, and the sampler of --replay.samples (sampler: pebs, ibs, spe,
// or decode for timer samples with registers; "" without). What the
// recordings cannot tell (breakpoints, eBPF, hotplug uevents) is left
// out, not reported missing: pmu_info{source="replay"} says where the
// rest come from.
func recordedFeatures(rec *replay.Recording, sampler string) []capability.Feature {
	var hw, slots []string
	platformEvents := map[platform.Kind][]platform.Counter{}
	seen := map[string]bool{}
	for _, iv := range rec.Intervals {
		for _, s := range iv.Samples {
			if s.Missing() || seen[s.Event] {
				continue
			}
			seen[s.Event] = true
			if softwareEvents[strings.ToLower(s.Event)] {
				continue
			}
			if c, _, ok, _ := platform.Recorded(s.Event, s.Unit); ok {
				platformEvents[c.Kind] = append(platformEvents[c.Kind], c)
				continue
			}
			hw = append(hw, s.Event)
			if perfMetricsEvent(s.Event) {
				slots = append(slots, s.Event)
			}
		}
	}
	recorded := func(name string, ok bool, detail, reason string) capability.Feature {
		f := capability.Feature{Name: name, Available: ok}
		if ok {
			f.Detail = "recorded: " + detail
		} else {
			f.Reason = "not in the recording: " + reason
		}
		return f
	}
	few := func(events []string) string {
		if len(events) > 3 {
			return fmt.Sprintf("%s and %d more", strings.Join(events[:3], ", "), len(events)-3)
		}
		return strings.Join(events, ", ")
	}
	out := []capability.Feature{
		recorded(capability.HardwareCounters, len(hw) > 0, few(hw), "only software events were counted"),
		recorded(capability.PerfMetrics, len(slots) > 0, few(slots), "no slots or topdown-* events were counted"),
		recorded(capability.CgroupEvents, rec.Cgroups, "perf stat -G columns", "recorded without perf stat -G"),
	}
	out = append(out, recordedPlatform(platformEvents, recorded)...)
	if sampler != "" {
		precise := sampler == "pebs" || sampler == "ibs" || sampler == "spe"
		out = append(out, recorded(capability.AddressSampling, true, sampler+" samples in --replay.samples", ""),
			recorded(capability.PreciseSampling, precise, sampler+" samples", "timer samples with registers, no precise sampler"))
		if sampler == "ibs" || sampler == "spe" {
			out = append(out, recorded(map[string]string{"ibs": capability.IBS, "spe": capability.SPE}[sampler], true, sampler+" samples", ""))
		}
	}
	return out
}

// perfMetricsEvent says whether perf stat's event name is one of the
// PERF_METRICS slots: slots and topdown-* as perf aliases them (cpu/…/ or
// cpu_core/…/ around them too), TOPDOWN.SLOTS and PERF_METRICS.* as Intel
// names them.
func perfMetricsEvent(event string) bool {
	name := strings.Trim(event, "/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	upper := strings.ToUpper(name)
	return name == "slots" || strings.HasPrefix(name, "topdown-") || strings.HasPrefix(upper, "TOPDOWN.SLOTS") || strings.HasPrefix(upper, "PERF_METRICS.")
}

// recordedPlatform are the platform features (host/capability's energy,
// frequency, cstates, memory_bandwidth, memory_requests, numa_traffic,
// upi_traffic) as the recording's platform events show them.
func recordedPlatform(events map[platform.Kind][]platform.Counter, recorded func(name string, ok bool, detail, reason string) capability.Feature) []capability.Feature {
	names := func(kinds ...platform.Kind) string {
		var out []string
		for _, k := range kinds {
			for _, c := range events[k] {
				out = append(out, c.PMU+"/"+c.Event+"/")
			}
		}
		return strings.Trim(strings.Join(out, ", "), "/")
	}
	msrs := map[string]bool{}
	for _, c := range events[platform.MSR] {
		msrs[c.Name] = true
	}
	return []capability.Feature{
		recorded(capability.Energy, len(events[platform.Energy]) > 0, names(platform.Energy), "no power/energy-*/ events"),
		recorded(capability.Frequency, msrs["aperf"] && msrs["mperf"] && msrs["tsc"], names(platform.MSR), "not all of msr/tsc/, msr/aperf/ and msr/mperf/"),
		recorded(capability.CStates, len(events[platform.CoreCState])+len(events[platform.PackageCState]) > 0, names(platform.CoreCState, platform.PackageCState), "no cstate_core or cstate_pkg events"),
		recorded(capability.MemoryBandwidth, len(events[platform.MemoryBytes]) > 0, names(platform.MemoryBytes), "no memory controller CAS counts"),
		recorded(capability.MemoryRequests, len(events[platform.MemoryRequests]) > 0, names(platform.MemoryRequests), "no Arm CMN memory controller requests"),
		recorded(capability.NUMATraffic, len(events[platform.LLCMissBytes])+len(events[platform.DRAMBytes]) > 0, names(platform.LLCMissBytes, platform.DRAMBytes), "no CHA requests to local and remote memory, no data fabric DRAM beats"),
		recorded(capability.UPITraffic, len(events[platform.UPIBytes])+len(events[platform.XGMIBytes]) > 0, names(platform.UPIBytes, platform.XGMIBytes), "no UPI data flits, no xGMI data beats"),
	}
}
