package collector

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/flaglist"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpubind"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/platformcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
	"github.com/pmu-exporter/pmu_exporter/model"
	"github.com/pmu-exporter/pmu_exporter/plan/config"
	"github.com/pmu-exporter/pmu_exporter/plan/platform"
	"github.com/pmu-exporter/pmu_exporter/plan/profile"
)

// topdownEntry is the topdown collector in the registry: it computes Top-
// Down from the counted groups; its flags (--collector.topdown.*) bound to
// f, and its live and replay factories.
func topdownEntry(f *Options) registry.Collector[*build] {
	return registry.Collector[*build]{Name: "topdown", Default: true, Live: liveTopdownCollector, Replay: replayTopdown,
		Help: "Compute Top-Down (levels 1 and 2 by default; --collector.topdown.level for more) where the CPU has a built-in tree (or --collector.topdown.definitions gives one)",
		Options: func(o registry.Options) {
			o.Flag("uarch", "topdown.uarch", "Top-Down trees to use instead of the detected ones, comma-separated, one per core type (hybrids: adl,grt): "+strings.Join(topdown.Names(), ", ")+"; none makes --collector.topdown.definitions the whole tree.",
				func(fc *kingpin.FlagClause) { fc.StringVar(&f.tree.uarch) })
			o.Flag("definitions", "topdown.definitions", "YAML metric file extending or overriding the Top-Down tree (the first, P-core, tree on hybrids; the whole tree where no built-in one applies).", func(fc *kingpin.FlagClause) { fc.StringVar(&f.tree.definitions) })
			o.Flag("level", "", "The deepest Top-Down level counted and exported (1 to 6; 0: every level the tree has). Levels beyond 2 count more events, in more groups that the PMU multiplexes (pmu_group_running_seconds_total shows how much): toplev's -l. "+treeLevelsHelp+".", func(fc *kingpin.FlagClause) {
				flagrange.Int(fc, &f.tree.level, "2", 0, 6)
			})
			o.Flag("nodes", "", "Below level 1, only these nodes' subtrees and their ancestors (comma-separated or repeated; as toplev's --nodes): e.g. memory_bound with --collector.topdown.level=3 counts the memory nodes' events alone.", func(fc *kingpin.FlagClause) {
				flaglist.Var(fc, &f.tree.nodes)
			})
			o.Flag("cgroup-level", "", "The deepest Top-Down level attributed to each cgroup (at most --collector.topdown.level): each level adds series per cgroup, and its events are read at every context switch between cgroups.", func(fc *kingpin.FlagClause) {
				flagrange.Int(fc, &f.tree.cgroupLevel, "2", 0, 6)
			})
		}}
}

// liveTopdownCollector adds the Top-Down trees' groups and their evaluation
// after each read.
func liveTopdownCollector(b *build) error {
	td, err := setupTopdown(b.f.tree, b.f.sysfs, *b.s)
	var userErr *metric.UserError
	switch {
	case errors.As(err, &userErr):
		// A broken --collector.topdown.definitions is a configuration error, as a bad
		// --config.file is: said at ERROR, counted in pmu_config_errors.
		b.log.Error("Top-Down not computed: the definitions file is not usable", "err", err)
		b.s.configErrors = append(b.s.configErrors, err)
		return err
	case err != nil:
		b.log.Info("Top-Down not computed", "reason", err)
		return err
	}
	for _, t := range td.trees {
		b.log.Info("Top-Down computed", "tree", t.Info.Uarch, "from", t.Info.Source, "smt", t.Info.SMT)
	}
	for _, w := range td.warnings {
		b.log.Warn("Top-Down group does not fit the counters; its events will be multiplexed", "problem", w)
	}
	b.s.groups = append(b.s.groups, td.groups...)
	b.td = td
	b.steps = append(b.steps, step{"topdown", func(snap model.Snapshot) error {
		for _, l := range td.lives {
			l.Update(snap)
		}
		return nil
	}})
	b.p.add("topdown", exporter.NewTopdown(td.trees, b.f.perCPU))
	return nil
}

// replayTopdown compiles the recording host's tree (--replay.uarch).
func replayTopdown(b *build) error {
	f := b.f
	if f.replay.uarch == "" {
		b.log.Info("Top-Down not computed", "reason", "no --replay.uarch")
		return fmt.Errorf("%w: no --replay.uarch", errNotRecorded)
	}
	def, err := topdown.Builtin(f.replay.uarch)
	if err != nil {
		return fmt.Errorf("--replay.uarch: %w", err)
	}
	if f.tree.level > def.Levels() {
		b.log.Info("Top-Down level beyond the tree", "uarch", f.replay.uarch, "levels", def.Levels(), "asked", f.tree.level)
	}
	_, tree, _, err := pruneTree(def, f.tree.level, 0, f.tree.nodes)
	if err != nil {
		return fmt.Errorf("--collector.topdown.level, --collector.topdown.nodes: %w", err)
	}
	params := map[string]float64{}
	if tree.Input("smt_on") >= 0 {
		params["smt_on"] = map[string]float64{"on": 1, "off": 0}[f.replay.smt]
	}
	if tree.Input("#slots") >= 0 {
		if f.replay.slots <= 0 {
			return fmt.Errorf("the %s tree needs the core's slots per cycle: pass --replay.slots", f.replay.uarch)
		}
		params["#slots"] = f.replay.slots
	}
	if topdown.NeedsTSC(tree) {
		if f.replay.tscHz <= 0 {
			return fmt.Errorf("the %s tree's nodes below level 3 scale by the core frequency: pass --replay.tsc-hz (the recording host's TSC frequency) or a lower --collector.topdown.level", f.replay.uarch)
		}
		topdown.SetTSC(params, f.replay.tscHz)
	}
	b.replay.tree, b.replay.params, b.replay.uarch = tree, params, def.Name
	return nil
}

// treeLevelsHelp says how deep each built-in Top-Down tree goes. It is
// written out rather than read from the trees at start-up, which parses
// all of them (115 ms, on every command); TestTreeLevelsHelp holds it to
// topdown.Depths.
const treeLevelsHelp = "Built-in trees' levels: 1 (neoverse, neoverse-n2, neoverse-v1, neoverse-v2); 2 (zen4, zen5); 3 (grt, srf); 6 (adl, clx, emr, gnr, icl, icx, skl, skx, spr)"

// treeFlags are the topdown collector's.
type treeFlags struct {
	enabled            bool
	uarch, definitions string
	// level is the deepest level counted (0: all the tree has), nodes the
	// subtrees below level 1 (none: all), cgroupLevel the deepest level
	// attributed to cgroups: deeper levels cost counters and multiplexing,
	// and per cgroup series too.
	level, cgroupLevel int
	nodes              []string
}

// liveTopdown is what serve needs to compute Top-Down: one tree per core type.
type liveTopdown struct {
	trees   []exporter.TopdownTree
	targets []placedTree // per core type, for per-cgroup Top-Down
	lives   []*topdown.Live
	groups  []perfcount.GroupSpec
	// warnings say which groups will not fit their CPUs' counters: the engine
	// will count their events one by one and ratios become estimates.
	warnings []string
}

// setupTopdown picks the trees (flag, else detected: one per core type on
// hybrids; a definitions file extends the first or, where none applies, is the
// tree), resolves their groups and parameters. The error says why Top-Down is
// not computed.
func setupTopdown(o treeFlags, sysfs string, s setup) (*liveTopdown, error) {
	if !o.enabled {
		return nil, errors.New("--no-collector.topdown")
	}
	var targets []topdown.Target
	switch {
	case o.uarch == "none":
		if o.definitions == "" {
			return nil, errors.New("--collector.topdown.uarch=none needs --collector.topdown.definitions")
		}
		targets = topdown.Place([]string{""}, s.pmus)
	case o.uarch != "":
		targets = topdown.Place(strings.Split(o.uarch, ","), s.pmus)
	default:
		t, err := topdown.ForHost(s.facts.CPU, s.pmus)
		if err != nil && o.definitions == "" {
			return nil, registry.Unavailable("%v", err) // no tree for this CPU
		}
		targets = t
		if err != nil { // the definitions file is the whole tree
			targets = topdown.Place([]string{""}, s.pmus)
		}
	}
	on := map[string]string{}
	for _, t := range targets {
		if other, ok := on[t.PMU]; ok {
			return nil, fmt.Errorf("trees %s and %s would both count on the same CPUs (core PMU %q); give one tree per core type", other, t.Uarch, cmp.Or(t.PMU, "cpu"))
		}
		on[t.PMU] = t.Uarch
	}
	td := &liveTopdown{}
	for i, t := range targets {
		var user string
		if i == 0 {
			user = o.definitions // extends the first tree: the P-core tree on hybrids
		}
		tree, err := setupTree(sysfs, s, t, user, o)
		if err != nil {
			if t.Uarch == "" { // the definitions file alone: its errors say where
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", t.Uarch, err)
		}
		td.trees = append(td.trees, exporter.TopdownTree{Src: tree.live, Info: tree.info})
		td.lives = append(td.lives, tree.live)
		td.targets = append(td.targets, tree.placedTree)
		td.groups = append(td.groups, tree.groups...)
		if tree.warning != "" {
			td.warnings = append(td.warnings, tree.warning)
		}
	}
	return td, nil
}

// placedTree is a compiled tree on its core PMU ("" on a host with one),
// and the same tree to the level attributed to cgroups.
type placedTree struct {
	pmu        string
	tree       *metric.Tree
	cgroupTree *metric.Tree
	params     map[string]float64
}

// oneTree is one tree set up on its core PMU.
type oneTree struct {
	placedTree
	live    *topdown.Live
	info    exporter.TopdownInfo
	groups  []perfcount.GroupSpec
	warning string
}

// setupTree builds the tree of target t, extended or replaced by the user's
// definitions file when one is given.
func setupTree(sysfs string, s setup, t topdown.Target, userFile string, o treeFlags) (*oneTree, error) {
	var def *metric.Definition
	if t.Uarch != "" {
		if !s.report.Feature(capability.HardwareCounters).Available {
			// A host with a tree but no PMU to count it (a VM of a CPU
			// that has one): unavailable here, not failed.
			return nil, registry.Unavailable("the %s tree needs hardware counters: %s", t.Uarch, s.report.Feature(capability.HardwareCounters).Reason)
		}
		d, err := topdown.Builtin(t.Uarch)
		if err != nil {
			return nil, err
		}
		def = d
	}
	var err error
	if userFile != "" {
		b, rerr := safeopen.ReadInput("--collector.topdown.definitions", userFile, safeopen.YAML, nil)
		if rerr != nil {
			return nil, &metric.UserError{File: userFile, Err: rerr}
		}
		if def, _, err = metric.Extend(def, userFile, b); err != nil {
			return nil, err
		}
	}
	def, tree, cgroupTree, err := pruneTree(def, o.level, o.cgroupLevel, o.nodes)
	if err != nil {
		return nil, err
	}
	groups, err := topdown.LiveGroups(def, s.pmus, t.PMU)
	if err != nil {
		return nil, err
	}
	params := map[string]float64{}
	info := exporter.TopdownInfo{Uarch: def.Name, Source: "events", SMT: "n/a"}
	if tree.Input("smt_on") >= 0 {
		on, err := host.SMTActive(sysfs)
		if err != nil {
			return nil, err
		}
		params["smt_on"], info.SMT = 0, "off"
		if on {
			params["smt_on"], info.SMT = 1, "on"
		}
	}
	if tree.Input("#slots") >= 0 {
		if params["#slots"] = topdown.CoreSlots(s.pmus); params["#slots"] == 0 {
			return nil, errors.New("the core PMU reports no caps/slots")
		}
	}
	if topdown.NeedsTSC(tree) {
		measure := s.tscHz
		if measure == nil {
			measure = func() (float64, error) { return MeasureTSC(s.pmus, sysfs) }
		}
		hz, err := measure()
		if err != nil {
			return nil, fmt.Errorf("Top-Down below level 3 scales some nodes by the core frequency, from the TSC's rate: %w", err)
		}
		topdown.SetTSC(params, hz)
	}
	for _, e := range def.Events {
		if strings.HasPrefix(e.Name, "PERF_METRICS.") {
			info.Source = "perf_metrics"
		}
	}
	out := &oneTree{placedTree: placedTree{pmu: t.PMU, tree: tree, cgroupTree: cgroupTree, params: params}, live: topdown.NewLive(tree, groups, params), info: info, groups: groups}
	counters := s.report.Counters
	if t.PMU != "" { // hybrid: ask a CPU of this core type
		for _, p := range s.pmus {
			if p.Name == t.PMU && len(p.CPUs) > 0 {
				if c, err := cpubind.CountersOn(s.facts.CPU.Vendor, p.CPUs[0]); err == nil {
					counters = c
				}
			}
		}
	}
	if counters.Known {
		if err := topdown.CheckFit(def, s.pmus, t.PMU, s.facts.CPU.Vendor == "GenuineIntel", counters.GeneralPurpose); err != nil {
			out.warning = err.Error()
		}
	}
	return out, nil
}

// pruneTree cuts def to the levels and nodes asked for (metric.Prune), and
// compiles it; cgroupTree is the same cut no deeper than cgroupLevel, a
// subset of its inputs.
func pruneTree(def *metric.Definition, level, cgroupLevel int, nodes []string) (cut *metric.Definition, tree, cgroupTree *metric.Tree, err error) {
	if cut, err = def.Prune(level, nodes); err != nil {
		return nil, nil, nil, err
	}
	if tree, err = cut.Compile(); err != nil {
		return nil, nil, nil, err
	}
	cgroupTree = tree
	if cgroupLevel > 0 && (level == 0 || cgroupLevel < level) {
		// A node deeper than cgroupLevel is its ancestor at that level.
		var inNodes []string
		for _, n := range nodes {
			for n != "" {
				i := slices.IndexFunc(def.Metrics, func(m metric.Metric) bool { return m.Name == n })
				if i < 0 {
					break
				}
				if def.Metrics[i].Level <= cgroupLevel {
					if !slices.Contains(inNodes, n) {
						inNodes = append(inNodes, n)
					}
					break
				}
				n = def.Metrics[i].Parent
			}
		}
		cg, err := def.Prune(cgroupLevel, inNodes)
		if err != nil {
			return nil, nil, nil, err
		}
		if cgroupTree, err = cg.Compile(); err != nil {
			return nil, nil, nil, err
		}
	}
	return cut, tree, cgroupTree, nil
}

// treeInfo is the Info events of the host's Top-Down trees (their info:
// lists, the core's own events, such as Intel's MEM_LOAD_RETIRED.L1_MISS,
// L2_MISS and L3_MISS behind toplev's MPKI), one group per tree, on its
// core PMU (a hybrid's cpu_core or cpu_atom); none where no built-in tree
// applies (--collector.topdown.uarch names it, else the host's CPU).
func treeInfo(uarch string, s setup) []config.Group {
	targets := topdown.Place(strings.Split(uarch, ","), s.pmus)
	if uarch == "" {
		var err error
		if targets, err = topdown.ForHost(s.facts.CPU, s.pmus); err != nil {
			return nil
		}
	}
	var out []config.Group
	for _, t := range targets {
		d, err := topdown.Builtin(t.Uarch)
		if err != nil || len(d.Info) == 0 {
			continue
		}
		core := t.PMU // a hybrid's core type
		if core == "" {
			core = firstCorePMU(s.pmus) // cpu on x86, armv8_pmuv3_0 and the like on Arm
		}
		var specs []string
		for _, e := range d.Info {
			spec := e.Spec
			if core != "" && strings.HasPrefix(spec, "cpu/") { // the trees' cpu/ specs, on this core's PMU
				spec = core + "/" + strings.TrimPrefix(spec, "cpu/")
			}
			specs = append(specs, spec)
		}
		if g, err := profile.Group("info-"+d.Name, specs...); err == nil {
			out = append(out, g)
		}
	}
	return out
}

// firstCorePMU is the name of the host's first core PMU ("" for none).
func firstCorePMU(pmus []*pmu.PMU) string {
	for _, p := range pmus {
		if p.IsCore() {
			return p.Name
		}
	}
	return ""
}

// MeasureTSC is the TSC's frequency in Hz: the msr PMU's tsc counted on
// the first online CPU for tscWindow.
func MeasureTSC(pmus []*pmu.PMU, sysfs string) (float64, error) {
	online, err := host.OnlineCPUs(sysfs)
	if err != nil || len(online) == 0 {
		return 0, fmt.Errorf("no online CPU to count the TSC on (%v)", err)
	}
	cs, err := platform.Select(pmus, online[:1], "")
	if err != nil {
		return 0, err
	}
	for _, c := range cs {
		if c.PMU == "msr" && c.Event == "tsc" {
			return platformcount.Rate(c, online[0], tscWindow)
		}
	}
	return 0, errors.New("the msr PMU offers no tsc event")
}
