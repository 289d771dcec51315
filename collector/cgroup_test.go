package collector

import (
	"slices"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupcount"
)

// --collector.cgroup.events: comma-separated or repeated names, or all.
func TestAttributedEvents(t *testing.T) {
	keep := attributedEvents([]string{"cpu-clock, page-faults", "cycles"})
	for ev, want := range map[string]bool{"cpu-clock": true, "page-faults": true, "cycles": true, "minor-faults": false, "task-clock": false} {
		if got := keep(ev); got != want {
			t.Errorf("%s kept %v, want %v", ev, got, want)
		}
	}
	if all := attributedEvents([]string{"page-faults,all"}); !all("anything") {
		t.Error("all keeps everything")
	}
	if none := attributedEvents(nil); none("cpu-clock") {
		t.Error("no names keep nothing")
	}
}

// An event asked for that no class attributes is named in a note; the
// defaults' core events, which a VM without a PMU lacks, are not.
func TestUnattributableNamed(t *testing.T) {
	classes := []cgroupcount.Class{{Events: []cgroupcount.Source{{Event: "cpu-clock"}, {Event: "minor-faults"}}}}
	notes := unattributable([]string{"cpu-clock,cycles", "minor-faults,l3-misses"}, classes)
	want := []string{"--collector.cgroup.events names l3-misses, which no group counts per task: it is not attributed"}
	if !slices.Equal(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
}
