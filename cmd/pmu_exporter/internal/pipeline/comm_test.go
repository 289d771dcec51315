package pipeline

import (
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// The comm collector samples accesses with the host's precise PMU where it
// has one (a precise source wins), each sample decoded for its width, and
// with the timer address sampler elsewhere.
func TestCommConfigsPreferPrecise(t *testing.T) {
	flags := samplingFlags{period: 10007, ldlat: 30}
	for _, c := range []struct {
		name   string
		host   fixture.Host
		source string
		events []string
	}{
		{"skylake", fixture.IntelSkylake(), "pebs", []string{"mem-loads", "mem-stores"}},
		{"zen3", fixture.AMDZen3(), "ibs", []string{"ibs_op"}},
		{"no PMU", fixture.NoPMU(), "decode", []string{"decode"}},
		{"neoverse (SPE not read yet)", fixture.ArmNeoverseN1(), "decode", []string{"decode"}},
	} {
		cfgs, source, err := commConfigs(fixture.PMUs(t, c.host), 1e6, flags, true)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var names []string
		for _, cfg := range cfgs {
			names = append(names, cfg.Name)
			if !cfg.Decode || cfg.SampleType&sampling.Cgroup == 0 {
				t.Errorf("%s: %s is not decoded, or lacks the cgroup: %+v", c.name, cfg.Name, cfg)
			}
			if source != "decode" && (!cfg.Memory || cfg.Period != max(cfg.Align(10007), 16)) {
				t.Errorf("%s: %s: want a memory event at the sampling period: %+v", c.name, cfg.Name, cfg)
			}
		}
		if source != c.source || len(names) != len(c.events) || names[0] != c.events[0] {
			t.Errorf("%s: %s %v, want %s %v", c.name, source, names, c.source, c.events)
		}
	}
}
