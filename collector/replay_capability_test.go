package collector

import (
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/replay"
)

// What a recording shows of its host: hardware counters from any counted
// hardware event (a software-only recording shows none), the PERF_METRICS
// slots only from slots and topdown-* (not UOPS_RETIRED.RETIRE_SLOTS),
// cgroup events from perf stat -G, the samplers from --replay.samples, and
// the platform features from platform events (which are not the core's
// hardware counters): frequency only with all of tsc, aperf and mperf.
func TestRecordedFeatures(t *testing.T) {
	load := func(csv string) *replay.Recording {
		rec, err := replay.Load("rec.csv", strings.NewReader(csv))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	features := func(rec *replay.Recording, sampler string) map[string]bool {
		got := map[string]bool{}
		for _, f := range recordedFeatures(rec, sampler) {
			got[f.Name] = f.Available
		}
		return got
	}
	sw := load("1.0,100,,cpu-clock,1000,100.00,,\n1.0,3,,cs,1000,100.00,,\n")
	if got := features(sw, ""); got["hardware_counters"] || got["perf_metrics"] || got["cgroup_events"] || got["energy"] || got["memory_bandwidth"] || len(got) != 10 {
		t.Errorf("software events only: %v", got)
	}
	skx := load("1.0,100,,UOPS_RETIRED.RETIRE_SLOTS,1000,100.00,,\n1.0,<not counted>,,INST_RETIRED.ANY,0,0.00,,\n")
	if got := features(skx, "pebs"); !got["hardware_counters"] || got["perf_metrics"] || !got["precise_sampling"] || !got["address_sampling"] {
		t.Errorf("skx with PEBS samples: %v", got)
	}
	spr := load("1.0,CPU0,100,,cpu_core/topdown-fe-bound/,1000,100.00,,\n")
	if got := features(spr, "decode"); !got["perf_metrics"] || got["precise_sampling"] || !got["address_sampling"] {
		t.Errorf("spr with timer samples: %v", got)
	}
	none := load("1.0,<not supported>,,cycles,0,0.00,,\n1.0,5,,task-clock,1000,100.00,,\n")
	if got := features(none, "spe"); got["hardware_counters"] || !got["spe"] {
		t.Errorf("cycles not supported, SPE samples: %v", got)
	}
	platform := load("1.0,CPU0,1.25,Joules,power/energy-pkg/,1000,100.00,,\n1.0,CPU0,5,,msr/aperf/,1000,100.00,,\n1.0,CPU0,5,,msr/tsc/,1000,100.00,,\n" +
		"1.0,CPU0,0.50,MiB,uncore_imc_0/cas_count_read/,1000,100.00,,\n1.0,CPU0,7,,cstate_pkg/c6-residency/,1000,100.00,,\n")
	if got := features(platform, ""); got["hardware_counters"] || !got["energy"] || got["frequency"] || !got["cstates"] || !got["memory_bandwidth"] || got["numa_traffic"] {
		t.Errorf("energy, aperf and tsc without mperf, CAS counts, package C6: %v", got)
	}
}
