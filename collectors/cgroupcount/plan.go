package cgroupcount

import (
	"fmt"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfcount"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/topdown/metric"
)

// Class is one core type: the CPUs on which the same events sit in the same
// program slots, and the Top-Down tree evaluated there, if any.
type Class struct {
	PMU    string // the core PMU ("" where the host has one, or none)
	CPUs   []int  // nil: every CPU
	Tree   *metric.Tree
	Params map[string]float64 // the tree's smt_on, #slots, ...
	// Events are the attributed events in program slot order (Plan fills it).
	Events []Source
}

// Source is one attributed event and the counting engine's group whose file
// descriptor the program reads.
type Source struct {
	Event, Group string
	// Hidden events feed Top-Down only and, as on the node, get no
	// pmu_cgroup_events_total series.
	Hidden bool
}

// Plan picks each class's events from the engine's groups: the class's
// Top-Down inputs first (per-cgroup Top-Down needs all of them), then every
// other event in group order, up to cgroupbpf.MaxEvents. Each is read from the
// first group that counts it on the class's CPUs. Events of PMUs that do not
// count per task (uncore: perTask false) are left out: a cgroup cannot own
// them. The notes say what could not be attributed.
func Plan(classes []Class, groups []perfcount.GroupSpec, perTask func(pmu string) bool) (out []Class, notes []string) {
	for _, c := range classes {
		type found struct {
			group  string
			hidden bool
		}
		first := map[string]found{}
		var order []string
		for _, g := range groups {
			if !overlaps(g.CPUs(), c.CPUs) {
				continue
			}
			for _, ev := range g.Events {
				if !perTask(ev.PMU) {
					continue
				}
				f, seen := first[ev.Name]
				if !seen {
					first[ev.Name] = found{g.Name, g.Hidden}
					order = append(order, ev.Name)
				} else if !g.Hidden && f.hidden { // visible anywhere: visible
					f.hidden = false
					first[ev.Name] = f
				}
			}
		}
		var picked []string
		if c.Tree != nil {
			for _, e := range c.Tree.Def.Events {
				if _, ok := first[e.Name]; ok && !slices.Contains(picked, e.Name) {
					picked = append(picked, e.Name)
				}
			}
		}
		for _, name := range order {
			if !slices.Contains(picked, name) {
				picked = append(picked, name)
			}
		}
		if len(picked) > cgroupbpf.MaxEvents {
			notes = append(notes, fmt.Sprintf("%d events count on %s; only %d can be attributed to cgroups, %v are not",
				len(picked), classLabel(c), cgroupbpf.MaxEvents, picked[cgroupbpf.MaxEvents:]))
			picked = picked[:cgroupbpf.MaxEvents]
		}
		c.Events = nil
		for _, name := range picked {
			c.Events = append(c.Events, Source{Event: name, Group: first[name].group, Hidden: first[name].hidden})
		}
		out = append(out, c)
	}
	return out, notes
}

func classLabel(c Class) string {
	if c.PMU == "" {
		return "the CPUs"
	}
	return c.PMU + "'s CPUs"
}

// overlaps says whether a group on groupCPUs counts on some of classCPUs (nil:
// every CPU).
func overlaps(groupCPUs, classCPUs []int) bool {
	if groupCPUs == nil || classCPUs == nil {
		return true
	}
	for _, c := range groupCPUs {
		if cpuset.Contains(classCPUs, c) {
			return true
		}
	}
	return false
}
