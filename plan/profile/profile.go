// Package profile decides what the exporter counts: the built-in default groups
// (software events everywhere; on a PMU the usual core and cache events) plus the
// groups of the config file, resolved against the host's PMUs into groups that can
// be opened. A group of generic events on a hybrid host becomes one group per core
// PMU, each on that PMU's CPUs. It is pure: PMUs come from package pmu.
package profile

import (
	"errors"
	"fmt"
	"sort"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/plan/config"
)

// defaultPos marks where built-in groups come from in error messages.
var defaultPos = config.Pos{File: "<default profile>"}

// Default returns the built-in groups. Groups are small and split by what may be
// missing, so one unsupported event (ref-cycles on AMD, cgroup-switches before
// Linux 5.13) does not take its neighbours down with it.
func Default(hardware bool) []config.Group {
	groups := []config.Group{
		group("software", "cpu-clock", "task-clock", "page-faults", "minor-faults", "major-faults",
			"context-switches", "cpu-migrations"),
		group("cgroup-switches", "cgroup-switches"),
	}
	if hardware {
		groups = append(groups,
			// Cycles and instructions apart from the branch events: a PMU
			// without the generic branch events (QEMU's arm64 PMUv3) still
			// counts the first two; one missing member fails its group.
			group("core", "cycles", "instructions"),
			group("branches", "branches", "branch-misses"),
			group("cache", "cache-references", "cache-misses"),
			group("ref-cycles", "ref-cycles"),
		)
	}
	return groups
}

// Info returns the groups of the Info metrics' inputs the default groups
// lack (loads, stores and their L1 data cache misses, last-level cache
// loads and misses), as perf's generic cache events, which the kernel maps
// on each vendor's PMU (an event it does not map, as stores on AMD, fails
// alone). The ratios are PromQL's (deploy/prometheus: MPKI, CPI). Level 2
// has no generic event: its misses need the core's own events.
func Info() []config.Group {
	return []config.Group{
		group("l1d", "L1-dcache-loads", "L1-dcache-load-misses"),
		group("l1d-stores", "L1-dcache-stores"),
		group("llc", "LLC-loads", "LLC-load-misses"),
	}
}

// Group is a built-in group of name over perf event specs (a tree's Info
// events); an error names the spec that does not parse.
func Group(name string, specs ...string) (config.Group, error) {
	g := config.Group{Name: name, Pos: defaultPos}
	for _, s := range specs {
		spec, err := eventspec.Parse(s)
		if err != nil {
			return g, fmt.Errorf("group %s: event %q: %w", name, s, err)
		}
		g.Events = append(g.Events, config.Event{Spec: spec, Pos: defaultPos})
	}
	return g, nil
}

func group(name string, specs ...string) config.Group {
	g := config.Group{Name: name, Pos: defaultPos}
	for _, s := range specs {
		spec, err := eventspec.Parse(s)
		if err != nil {
			panic(fmt.Sprintf("built-in event %q does not parse: %v", s, err)) // a programming error, caught by tests
		}
		g.Events = append(g.Events, config.Event{Spec: spec, Pos: defaultPos})
	}
	return g
}

// Build resolves groups against pmus. It returns every group it could resolve and
// the joined errors, with positions, for those it could not.
func Build(groups []config.Group, pmus []*pmu.PMU) ([]eventspec.Group, error) {
	var out []eventspec.Group
	var errs []error
	type owner struct {
		group string
		pos   config.Pos
	}
	counted := map[[2]string]owner{} // (event label, pmu label) -> where first counted
	for _, g := range groups {
		specs, err := resolveGroup(g, pmus)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dup := false
		for _, s := range specs {
			for i, ev := range s.Events {
				key := [2]string{ev.Name, ev.PMU}
				if o, ok := counted[key]; ok {
					errs = append(errs, &config.Error{Pos: g.Events[i%len(g.Events)].Pos, Err: fmt.Errorf(
						"event %q on PMU %s is already counted in group %q (%s); give this one another label with name=",
						ev.Name, ev.PMU, o.group, o.pos)})
					dup = true
				}
			}
		}
		if dup {
			continue
		}
		for _, s := range specs {
			for i, ev := range s.Events {
				counted[[2]string{ev.Name, ev.PMU}] = owner{g.Name, g.Events[i%len(g.Events)].Pos}
			}
		}
		out = append(out, specs...)
	}
	return out, errors.Join(errs...)
}

func resolveGroup(g config.Group, pmus []*pmu.PMU) ([]eventspec.Group, error) {
	resolved := make([][]eventspec.Event, len(g.Events))
	hybrid := map[string]bool{} // core PMUs that some event expanded to
	for i, e := range g.Events {
		evs, err := e.Spec.Resolve(pmus)
		if err != nil {
			return nil, &config.Error{Pos: e.Pos, Err: err}
		}
		resolved[i] = evs
		if len(evs) > 1 {
			for _, ev := range evs {
				hybrid[ev.PMU] = true
			}
		}
	}
	if len(hybrid) == 0 {
		s := eventspec.Group{Name: g.Name}
		for _, evs := range resolved {
			s.Events = append(s.Events, evs[0])
		}
		if err := checkCPUs(g, s); err != nil {
			return nil, err
		}
		return []eventspec.Group{s}, nil
	}
	names := make([]string, 0, len(hybrid))
	for n := range hybrid {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []eventspec.Group
	for _, core := range names {
		s := eventspec.Group{Name: g.Name + "/" + core}
		for i, evs := range resolved {
			ev, ok := pick(evs, core)
			if !ok {
				return nil, &config.Error{Pos: g.Events[i].Pos, Err: fmt.Errorf(
					"group %q mixes %s events with %s, whose counters belong to other CPUs; split the group",
					g.Name, evs[0].PMU, core)}
			}
			s.Events = append(s.Events, ev)
		}
		out = append(out, s)
	}
	return out, nil
}

// pick chooses the event's variant for one core PMU: its own, or the single
// variant of an event that is not tied to core PMUs (software, uncore).
func pick(evs []eventspec.Event, core string) (eventspec.Event, bool) {
	for _, ev := range evs {
		if ev.PMU == core {
			return ev, true
		}
	}
	if len(evs) == 1 && evs[0].CPUs == nil {
		return evs[0], true
	}
	return eventspec.Event{}, false
}

func checkCPUs(g config.Group, s eventspec.Group) error {
	if cpus := s.CPUs(); cpus != nil && len(cpus) == 0 {
		return &config.Error{Pos: g.Pos, Err: fmt.Errorf("group %q has no CPU on which all its events can count (events of PMUs covering different CPUs)", g.Name)}
	}
	return nil
}
