package cgroupcount

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// PerfMode is the fallback where eBPF is not permitted: perf's own cgroup
// mode (PERF_FLAG_PID_CGROUP) for an allow-list of cgroups, each counted by
// its own copy of the groups on every CPU. Counts are exact (a cgroup's count
// includes its descendants', as the kernel matches them), but it costs one fd
// per event per CPU per cgroup, and no per-cgroup Top-Down is computed.
type PerfMode struct {
	engine *perfcount.Engine
	files  []*os.File
	paths  map[string]string // engine group name -> cgroup path
}

// perfModeSep joins a cgroup path and a group name into an engine group name.
const perfModeSep = "@"

// NewPerfMode prepares the groups for each cgroup path (as /proc/<pid>/cgroup
// writes it) under root; nothing opens before the first Cycle.
func NewPerfMode(root string, paths []string, groups []perfcount.GroupSpec, opts perfcount.Options) (*PerfMode, error) {
	m := &PerfMode{paths: map[string]string{}}
	var specs []perfcount.GroupSpec
	for _, p := range paths {
		f, err := os.Open(filepath.Join(root, filepath.Clean("/"+p)))
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("perf cgroup mode: cgroup %s: %w", p, err)
		}
		m.files = append(m.files, f)
		for _, g := range groups {
			name := g.Name + perfModeSep + p
			m.paths[name] = p
			specs = append(specs, perfcount.GroupSpec{Name: name, Events: g.Events, Hidden: g.Hidden, Cgroup: f})
		}
	}
	opts.Groups = specs
	m.engine = perfcount.New(opts)
	return m, nil
}

// Cycle opens what is not open yet and reads every group.
func (m *PerfMode) Cycle() { m.engine.Cycle() }

// ResetCPU reopens cpu's groups at the next Cycle (the main engine's
// OnCPUReset): cgroup-mode groups cannot find dead events themselves.
func (m *PerfMode) ResetCPU(cpu int, cause string) { m.engine.ResetCPU(cpu, cause) }

// Snapshot returns per-cgroup counts in the attributor's form.
func (m *PerfMode) Snapshot() model.CgroupSnapshot {
	s := m.engine.Snapshot()
	sums := map[string]map[string]float64{}
	fds := 0 // one per event per CPU where its group is open
	open := map[string]int{}
	for _, g := range s.Groups {
		open[g.Name] = g.OpenCPUs
	}
	for _, e := range s.Events {
		p := m.pathOf(e.Group)
		fds += open[e.Group]
		if e.Hidden || len(e.PerCPU) == 0 {
			continue
		}
		if sums[p] == nil {
			sums[p] = map[string]float64{}
		}
		sums[p][e.Event] += float64(e.Sum())
	}
	out := model.CgroupSnapshot{Tracked: len(m.files), Errors: map[string]uint64{}, PerfModeFDs: fds}
	for p, evs := range sums {
		c := model.Cgroup{Path: p}
		c.Identity, _ = podcgroup.Parse(p)
		for n, v := range evs {
			c.Events = append(c.Events, model.Count{Event: n, Value: v})
		}
		sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].Event < c.Events[j].Event })
		out.Cgroups = append(out.Cgroups, c)
	}
	sort.Slice(out.Cgroups, func(i, j int) bool { return out.Cgroups[i].Path < out.Cgroups[j].Path })
	return out
}

// pathOf maps an engine group (or a split "<group>@<path>/<event>") to its cgroup.
func (m *PerfMode) pathOf(group string) string {
	if p, ok := m.paths[group]; ok {
		return p
	}
	for name, p := range m.paths {
		if strings.HasPrefix(group, name+"/") {
			return p
		}
	}
	return ""
}

// Close closes every group and cgroup directory.
func (m *PerfMode) Close() {
	if m.engine != nil {
		m.engine.Close()
	}
	for _, f := range m.files {
		f.Close()
	}
}
