package cgroupcount

import (
	"fmt"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
)

// Class is one core type: the CPUs on which the same events sit in the same
// program slots.
type Class struct {
	PMU  string // the core PMU ("" where the host has one, or none)
	CPUs []int  // nil: every CPU
	// First are the events attributed before any other, in this order:
	// the inputs of the Top-Down tree evaluated per cgroup on these CPUs,
	// which needs all of them.
	First []string
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
// First (its Top-Down inputs: per-cgroup Top-Down needs all of them), then every
// other event in group order that keep accepts, up to cgroupbpf.MaxEvents,
// then the clock events moved after the others (clocksLast). Each is read
// from the first group that counts it on the class's CPUs. Events of PMUs
// that do not count per task (uncore: perTask false) are left out: a cgroup
// cannot own them. Every event attributed costs a read at every credit, at
// every context switch between cgroups. The notes say what could not be
// attributed.
func Plan(classes []Class, groups []perfcount.GroupSpec, perTask func(pmu string) bool, keep func(event string) bool) (out []Class, notes []string) {
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
		for _, name := range c.First {
			if _, ok := first[name]; ok && !slices.Contains(picked, name) {
				picked = append(picked, name)
			}
		}
		for _, name := range order {
			if !slices.Contains(picked, name) && keep(name) {
				picked = append(picked, name)
			}
		}
		if len(picked) > cgroupbpf.MaxEvents {
			notes = append(notes, fmt.Sprintf("%d events count on %s; only %d can be attributed to cgroups, %v are not",
				len(picked), classLabel(c), cgroupbpf.MaxEvents, picked[cgroupbpf.MaxEvents:]))
			picked = picked[:cgroupbpf.MaxEvents]
		}
		c.Events = nil
		for _, name := range clocksLast(picked) {
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

// The clock events: reading one's count takes the kernel's clock, and
// task-clock's count is its running time (sharedTimes).
const (
	cpuClock  = "cpu-clock"
	taskClock = "task-clock"
)

// clocksLast moves the clock events after the others, keeping each side's
// order: a perf group's first slot is read with its times (a clock read),
// and a clock event there would read the clock twice (its count and its
// times) where another event reads it once.
func clocksLast(names []string) []string {
	isClock := func(n string) bool { return n == cpuClock || n == taskClock }
	out := slices.DeleteFunc(slices.Clone(names), isClock)
	for _, n := range names {
		if isClock(n) {
			out = append(out, n)
		}
	}
	return out
}

// sharedTimes says how the program reads the events of one perf group
// placed in slots (names: their events, in the same order). The group's
// lowest slot that is not task-clock is read with its enabled and running
// times, and every higher slot shares them (members of a group are
// scheduled together), reading its count alone; task-clock, whose count is
// its running time, is not read at all. Slots below the first one read
// their own times.
func sharedTimes(slots []int, names []string) []cgroupbpf.How {
	hows := make([]cgroupbpf.How, len(slots))
	source := -1
	for k, n := range names {
		if n != taskClock && (source < 0 || slots[k] < slots[source]) {
			source = k
		}
	}
	if source < 0 {
		return hows // task-clock alone: its own times
	}
	for k := range slots {
		if slots[k] > slots[source] {
			hows[k] = cgroupbpf.How{TimesFrom: slots[source], Shared: true, TaskClock: names[k] == taskClock}
		}
	}
	return hows
}
