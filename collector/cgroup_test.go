package collector

import (
	"slices"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupcount"
)

// --collector.cgroup.events: comma-separated or repeated names, or all,
// as the flag parses them.
func TestAttributedEvents(t *testing.T) {
	events := func(args ...string) []string {
		return parse(t, append([]string{"serve"}, args...)).cgroups.events
	}
	keep := attributedEvents(events("--collector.cgroup.events=cpu-clock, page-faults", "--collector.cgroup.events=cycles"))
	for ev, want := range map[string]bool{"cpu-clock": true, "page-faults": true, "cycles": true, "minor-faults": false, "task-clock": false} {
		if got := keep(ev); got != want {
			t.Errorf("%s kept %v, want %v", ev, got, want)
		}
	}
	if all := attributedEvents(events("--collector.cgroup.events=page-faults,all")); !all("anything") {
		t.Error("all keeps everything")
	}
	if def := attributedEvents(events()); !def("task-clock") || def("minor-faults") {
		t.Errorf("the default keeps %q", DefaultCgroupEvents)
	}
	if none := attributedEvents(nil); none("cpu-clock") {
		t.Error("no names keep nothing")
	}
}

// An event asked for that no class attributes is named in a note; the
// defaults' core events, which a VM without a PMU lacks, are not.
func TestUnattributableNamed(t *testing.T) {
	classes := []cgroupcount.Class{{Events: []cgroupcount.Source{{Event: "cpu-clock"}, {Event: "minor-faults"}}}}
	o := parse(t, []string{"serve", "--collector.cgroup.events=cpu-clock,cycles", "--collector.cgroup.events", "minor-faults, l3-misses"})
	notes := unattributable(o.cgroups.events, classes)
	want := []string{"--collector.cgroup.events names l3-misses, which no group counts per task: it is not attributed"}
	if !slices.Equal(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
}
