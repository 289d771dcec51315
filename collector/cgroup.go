package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/analysis/cgroupattr"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/flaglist"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podmeta"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// cgroupEntry is the cgroup collector in the registry: it attributes the
// counted events and Top-Down to cgroups; its flags (--collector.cgroup.*)
// bound to f, and its live and replay factories.
func cgroupEntry(f *Options) registry.Collector[*build] {
	return registry.Collector[*build]{Name: "cgroup", Default: true, Needs: []string{capability.CgroupEvents},
		Live: liveCgroup, Replay: replayCgroups,
		Help: "Attribute the counted events and Top-Down to cgroups (pods, containers) with an eBPF program on cgroup switches",
		Options: func(o registry.Options) {
			o.Flag("depth", "cgroup.depth", "Ancestor levels below the root that also get the counts of their descendants (kubelet pods sit at level 3, containers at 4).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.cgroups.depth, "5", 0, 64) })
			o.Flag("events", "cgroup.events", "Counted events to attribute to cgroups besides Top-Down's inputs (comma-separated or repeated; all: every counted event). Each one is a counter read at every context switch between cgroups.", func(fc *kingpin.FlagClause) {
				flaglist.Var(fc.Default(strings.Join(DefaultCgroupEvents, ",")), &f.cgroups.events)
			})
			o.Flag("max-series", "cgroup.max-series", "Cgroups exported with series of their own; the smallest consumers beyond it are summed into cgroup=\"other\".", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.cgroups.maxSeries, "500", 1, 1_000_000) })
			o.Flag("max-tracked", "cgroup.max-tracked", "Cgroups the kernel's attribution map holds at once; credits beyond it are dropped and counted in pmu_cgroup_attribution_errors_total{reason=\"map_full\"}.", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.cgroups.maxTracked, "16384", 1, 1<<22) })
			o.Flag("grace-period", "cgroup.grace-period", "How long a removed cgroup keeps its series before they are dropped.", func(fc *kingpin.FlagClause) { flagrange.Duration(fc, &f.cgroups.grace, "5m", 0, 24*time.Hour) })
			o.Flag("perf-mode", "cgroup.perf-mode", "Where the eBPF attribution cannot run (no CAP_BPF, no cgroup-switches): count this cgroup (path as in /proc/<pid>/cgroup; repeatable) with perf's cgroup mode instead, at one fd per event per CPU per cgroup.", func(fc *kingpin.FlagClause) { fc.StringsVar(&f.cgroups.perfMode) })
		}}
}

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

// liveCgroup attributes the counted events (and Top-Down) to cgroups with
// the eBPF program, or with perf's cgroup mode for the allow-listed cgroups
// where eBPF cannot run; pod names come from the API when it is reachable.
func liveCgroup(b *build) error {
	f, logger := b.f, b.log
	attributor, feat, notes := setupCgroups(f.cgroups, *b.s, b.td, b.s.groups, logger)
	b.s.report.Features = append(b.s.report.Features, feat)
	for _, n := range notes {
		logger.Warn("per-cgroup attribution is partial", "problem", n)
	}
	var perfMode *cgroupcount.PerfMode
	switch {
	case attributor != nil:
		logger.Info("per-cgroup attribution", "detail", feat.Detail)
		b.p.closers = append(b.p.closers, func() { attributor.Close() }) // after the engine has closed its groups
		b.engine.OnOpen, b.engine.OnClose = attributor.kernel.OnOpen, attributor.kernel.OnClose
		b.resets = append(b.resets, func(cpu int, _ string) { attributor.kernel.ResetCPU(cpu) })
		b.steps = append(b.steps, step{"cgroup", func(model.Snapshot) error {
			cpus, err := b.online.Read()
			if err != nil {
				return err
			}
			return newErrors(attributor.Snapshot, func() { attributor.Cycle(cpus) })
		}})
	case len(f.cgroups.perfMode) > 0:
		logger.Warn("per-cgroup attribution not running", "reason", feat.Reason, "fix", feat.Fix)
		pm, err := setupPerfMode(f.cgroups, *b.s, b.s.groups, perfcount.Options{OnlineCPUs: b.online.Read, Logger: logger})
		if err != nil {
			logger.Error("perf cgroup mode not running", "err", err)
			return err
		}
		perfMode = pm
		b.p.closers = append(b.p.closers, func() { pm.Close() })
		logger.Warn("counting the allow-listed cgroups with perf's cgroup mode instead: one fd per event per CPU per cgroup; see pmu_cgroup_perf_mode_fds", "cgroups", len(f.cgroups.perfMode))
		b.resets = append(b.resets, pm.ResetCPU)
		b.steps = append(b.steps, step{"cgroup", func(model.Snapshot) error { return newErrors(pm.Snapshot, pm.Cycle) }})
	default:
		logger.Warn("per-cgroup attribution not running", "reason", feat.Reason, "fix", feat.Fix)
		return errors.New(feat.Reason)
	}
	if f.k8sNode != "" {
		client, err := podmeta.Client(f.kubeconfig)
		if err != nil {
			logger.Warn("no pod names from the Kubernetes API; cgroup series carry pod UIDs and container IDs", "err", err)
		} else {
			pods := podmeta.New(client, f.k8sNode, logger)
			b.p.startPods = func(ctx context.Context) { go pods.Run(ctx) }
			b.names = pods // set only here: a nil *podmeta.Index must stay a nil interface
			b.p.add("cgroup", exporter.NewPodMeta(pods))
		}
	}
	if perfMode != nil {
		b.p.add("cgroup", exporter.NewCgroup(perfMode, b.names, exporter.PerfCgroupMode))
	} else {
		b.p.add("cgroup", exporter.NewCgroup(attributor, b.names, exporter.AttributedByBPF))
	}
	return nil
}

// newErrors runs a cycle of a per-cgroup source, which counts its failures
// rather than returning them, and says whether it counted new ones.
func newErrors(snapshot func() model.CgroupSnapshot, cycle func()) error {
	sum := func() (n uint64) {
		for _, v := range snapshot().Errors {
			n += v
		}
		return n
	}
	before := sum()
	cycle()
	if after := sum(); after > before {
		return fmt.Errorf("%d failures, by reason in pmu_cgroup_attribution_errors_total", after-before)
	}
	return nil
}

// replayCgroups plays the recording's perf stat -G cgroups.
func replayCgroups(b *build) error {
	if b.replay.rec == nil || !b.replay.rec.Cgroups {
		return fmt.Errorf("%w: recorded without perf stat -G", errNotRecorded)
	}
	b.replay.cgroups = true
	return nil
}

// cgroupFlags are the cgroup collector's (and the bounds per-cgroup
// sampling shares).
type cgroupFlags struct {
	enabled                      bool
	fsPath                       string // --path.cgroupfs
	depth, maxSeries, maxTracked int
	grace                        time.Duration
	perfMode                     []string
	events                       []string // attributed besides Top-Down's inputs; "all": every counted one
}
