package eventspec

import (
	"os"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// Group is one group to count: its events share a counter schedule, so their
// ratios are exact. Events must be valid on the same CPUs. The profiles and
// Top-Down trees plan groups; the counting collector opens them.
type Group struct {
	Name   string
	Events []Event
	// Hidden groups feed derived metrics (Top-Down) only: their events are not
	// exported as pmu_events_total, where an event counted in several such
	// groups would repeat a series.
	Hidden bool
	// Cgroup, if set, is a cgroup directory: the group then counts only
	// that cgroup's tasks (perf's cgroup mode, PERF_FLAG_PID_CGROUP), at the
	// cost of one fd per event per CPU per cgroup.
	Cgroup *os.File
}

// CPUs is where the group can count: the intersection of its events' CPU lists,
// or nil for every CPU.
func (g Group) CPUs() []int {
	var cpus []int
	for _, e := range g.Events {
		if e.CPUs == nil {
			continue
		}
		if cpus == nil {
			cpus = slices.Clone(e.CPUs)
			continue
		}
		cpus = slices.DeleteFunc(cpus, func(c int) bool { return !cpuset.Contains(e.CPUs, c) })
	}
	return cpus
}
