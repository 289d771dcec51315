package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/pmu-exporter/pmu_exporter/analysis/cgroupattr"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// cgroupAttribution wires the kernel's per-cgroup counts (kernel/cgroupcount)
// to the analysis that rolls them into ancestors, bounds them into series
// and runs Top-Down per cgroup (analysis/cgroupattr). Cycle runs on the
// engine's goroutine; Snapshot, the exporter's read, may run concurrently.
type cgroupAttribution struct {
	kernel   *cgroupcount.Attributor
	analysis *cgroupattr.Attribution

	mu   sync.Mutex
	snap model.CgroupSnapshot
}

// Cycle reads the kernel's counts on the online CPUs and updates the
// series; a failed read keeps the previous snapshot (the kernel side
// counts the error).
func (c *cgroupAttribution) Cycle(online []int) {
	counts, now, ok := c.kernel.Cycle(online)
	if !ok {
		return
	}
	s := c.analysis.Update(now, counts, c.kernel)
	c.kernel.Health(&s)
	c.mu.Lock()
	c.snap = s
	c.mu.Unlock()
}

// Close detaches the program and frees its maps; call it after the engine
// has closed its groups.
func (c *cgroupAttribution) Close() error { return c.kernel.Close() }

// Snapshot is the series after the latest cycle.
func (c *cgroupAttribution) Snapshot() model.CgroupSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

// analysisClasses are the planned classes as the analysis reads them: each
// one's events in slot order, which are hidden, and its Top-Down tree.
func analysisClasses(classes []cgroupcount.Class, trees []classTree) []cgroupattr.Class {
	out := make([]cgroupattr.Class, len(classes))
	for i, c := range classes {
		out[i] = cgroupattr.Class{PMU: c.PMU, Tree: trees[i].tree, Params: trees[i].params}
		for _, src := range c.Events {
			out[i].Events = append(out[i].Events, src.Event)
			out[i].Hidden = append(out[i].Hidden, src.Hidden)
		}
	}
	return out
}

// setupCgroups plans and loads the per-cgroup attribution of groups (the
// engine's, Top-Down included). The feature says whether it runs and, if not,
// why and how to fix it; the notes what could not be attributed.
func setupCgroups(o cgroupFlags, s setup, td *liveTopdown, groups []perfcount.GroupSpec, logger *slog.Logger) (*cgroupAttribution, capability.Feature, []string) {
	feat := capability.Feature{Name: capability.CgroupAttribution}
	fail := func(err error, fix string) (*cgroupAttribution, capability.Feature, []string) {
		feat.Reason, feat.Fix = err.Error(), fix
		return nil, feat, nil
	}
	if !o.enabled {
		return fail(errors.New("--no-collector.cgroup"), "drop --no-collector.cgroup")
	}
	root, v1 := cgroupRoot(o, s)
	if root == "" {
		return fail(errors.New("no cgroup v2 hierarchy and no cgroup v1 perf_event hierarchy is mounted"),
			"mount the host's cgroup hierarchy and pass --path.cgroupfs")
	}
	if bpf := s.report.Feature(capability.EBPF); !bpf.Available {
		return fail(fmt.Errorf("eBPF: %s", bpf.Reason), bpf.Fix)
	}
	classes, trees := cgroupClasses(s.pmus, td)
	classes, notes := cgroupcount.Plan(classes, groups, perTaskPMU(s.pmus), attributedEvents(o.events))
	notes = append(notes, unattributable(o.events, classes)...)
	k, err := cgroupcount.New(cgroupcount.Options{
		Classes: classes, Root: root, PerfEventV1: v1, Depth: o.depth, MaxCgroups: o.maxTracked, Logger: logger,
	})
	if err != nil {
		return fail(err, "the program needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), Linux 5.13+ (cgroup-switches; 6.1+ with cgroup v1) and a readable cgroup hierarchy")
	}
	feat.Available = true
	kind := "v2"
	if v1 {
		kind = "v1 perf_event"
	}
	feat.Detail = fmt.Sprintf("eBPF on cgroup switches, cgroup %s hierarchy at %s, depth %d", kind, root, o.depth)
	a := &cgroupAttribution{kernel: k,
		analysis: cgroupattr.NewAttribution(analysisClasses(classes, trees), cgroupattr.Options{MaxSeries: o.maxSeries, Grace: o.grace}, logger)}
	return a, feat, notes
}

// DefaultCgroupEvents are the events attributed to cgroups by default,
// besides Top-Down's inputs: CPU time, faults, context switches, and the
// core's cycles and instructions where it counts them. Each attributed
// event is one more counter read at every context switch between cgroups.
var DefaultCgroupEvents = []string{"cpu-clock", "task-clock", "page-faults", "context-switches", "cycles", "instructions"}

// attributedEvents says which counted events --collector.cgroup.events
// keeps ("all": every one).
func attributedEvents(names []string) func(event string) bool {
	if slices.Contains(names, "all") {
		return func(string) bool { return true }
	}
	return func(event string) bool { return slices.Contains(names, event) }
}

// unattributable names the events --collector.cgroup.events asks for that
// no class attributes (no group counts them, or not per task).
func unattributable(names []string, classes []cgroupcount.Class) []string {
	var notes []string
	for _, n := range names {
		if n == "all" || slices.Contains(DefaultCgroupEvents, n) {
			continue // the defaults name core events a host may lack
		}
		found := false
		for _, c := range classes {
			found = found || slices.ContainsFunc(c.Events, func(s cgroupcount.Source) bool { return s.Event == n })
		}
		if !found {
			notes = append(notes, fmt.Sprintf("--collector.cgroup.events names %s, which no group counts per task: it is not attributed", n))
		}
	}
	return notes
}

// cgroupRoot is the mount of the hierarchy whose cgroups are attributed (the
// one holding perf_event) and whether it is cgroup v1's. The flag overrides the
// mount point (in a container, the host's hierarchy), not the choice.
func cgroupRoot(o cgroupFlags, s setup) (root string, v1 bool) {
	root, v1 = s.facts.PerfEventCgroups()
	if o.fsPath != "" {
		root = o.fsPath
	}
	return root, v1
}

// taskCgroups looks up a process's cgroup id in the perf_event hierarchy
// at root (Arm SPE's samples carry none); nil, with a warning, where
// procfs cannot be read, or where no hierarchy holds the controller.
func taskCgroups(procPath, root string, v1 bool, logger *slog.Logger) func(pid uint32) (uint64, bool) {
	if root == "" {
		return nil
	}
	t, err := cgroupid.NewTasks(procPath, root, v1)
	if err != nil {
		logger.Warn("Arm SPE samples get no cgroup", "err", err)
		return nil
	}
	return t.ID
}

// classTree is the Top-Down tree a class evaluates per cgroup (nil: none).
type classTree struct {
	tree   *metric.Tree
	params map[string]float64
}

// cgroupClasses is one class per core type: the whole host where it has one
// core PMU (or none), else each core PMU's CPUs; each with its Top-Down
// tree, whose inputs it attributes first.
func cgroupClasses(pmus []*pmu.PMU, td *liveTopdown) ([]cgroupcount.Class, []classTree) {
	var cores []*pmu.PMU
	for _, p := range pmus {
		if p.IsCore() && p.CPUs != nil {
			cores = append(cores, p)
		}
	}
	var classes []cgroupcount.Class
	var trees []classTree
	add := func(name string, cpus []int) {
		c, ct := cgroupcount.Class{PMU: name, CPUs: cpus}, classTree{}
		if td != nil {
			for _, t := range td.targets {
				if t.pmu == name || len(td.targets) == 1 && len(cores) < 2 {
					ct = classTree{t.cgroupTree, t.params}
				}
			}
		}
		if ct.tree != nil {
			for _, e := range ct.tree.Def.Events {
				c.First = append(c.First, e.Name)
			}
		}
		classes, trees = append(classes, c), append(trees, ct)
	}
	if len(cores) < 2 {
		add("", nil)
		return classes, trees
	}
	for _, p := range cores {
		add(p.Name, slices.Clone(p.CPUs))
	}
	return classes, trees
}

// setupPerfMode is the fallback when the eBPF attribution is not running:
// perf's cgroup mode for the allow-listed cgroups, over the visible groups'
// per-task events.
func setupPerfMode(o cgroupFlags, s setup, groups []perfcount.GroupSpec, opts perfcount.Options) (*cgroupcount.PerfMode, error) {
	root, _ := cgroupRoot(o, s)
	if root == "" {
		return nil, errors.New("no cgroup v2 hierarchy is mounted")
	}
	perTask := perTaskPMU(s.pmus)
	var specs []perfcount.GroupSpec
	for _, g := range groups {
		if g.Hidden {
			continue
		}
		var evs []eventspec.Event
		for _, e := range g.Events {
			if perTask(e.PMU) {
				evs = append(evs, e)
			}
		}
		if len(evs) > 0 {
			specs = append(specs, perfcount.GroupSpec{Name: g.Name, Events: evs})
		}
	}
	return cgroupcount.NewPerfMode(root, o.perfMode, specs, opts)
}

// perTaskPMU says which events a cgroup can own: software, tracepoint and
// core events count what the CPU runs; uncore events do not.
func perTaskPMU(pmus []*pmu.PMU) func(string) bool {
	ok := map[string]bool{"software": true, "tracepoint": true}
	for _, p := range pmus {
		if p.IsCore() {
			ok[p.Name] = true
		}
	}
	return func(name string) bool { return ok[name] }
}
