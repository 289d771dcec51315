package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pmu-exporter/pmu_exporter/kernel/rlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpubind"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/platformcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/probe"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/plan/config"
	"github.com/pmu-exporter/pmu_exporter/plan/platform"
	"github.com/pmu-exporter/pmu_exporter/plan/profile"
)

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

// setup is what both commands need: the host, its PMUs, the capability verdict and
// the groups to count.
type setup struct {
	pmus         []*pmu.PMU
	facts        host.Facts
	report       capability.Report
	groups       []perfcount.GroupSpec
	configErrors []error
	// midrs are the CPUs' MIDR_EL1 (arm64): how their Arm SPE data
	// sources are encoded.
	midrs map[int]uint64
	// tscHz measures the TSC's frequency, for Intel's nodes below level 3
	// (MeasureTSC on this host's PMUs; nil: measured so).
	tscHz func() (float64, error)
}

// midr is cpu's MIDR_EL1, 0 where unknown.
func (s setup) midr(cpu int) uint64 { return s.midrs[cpu] }

func discover(f Options) setup {
	var s setup
	s.facts = host.Read(f.procfs, f.sysfs)
	pmus, err := pmu.Discover(f.sysfs)
	if err != nil {
		s.facts.Errors = append(s.facts.Errors, err)
	}
	s.pmus = pmus
	if s.midrs, err = host.MIDRs(f.sysfs); err != nil {
		s.facts.Errors = append(s.facts.Errors, err)
	}
	s.report = capability.Build(s.facts, pmus, host.ReadCounters(s.facts.CPU.Vendor), probe.Live(s.facts))
	s.report.Features = append(s.report.Features,
		accessCounting(s.facts.CPU, pmus, s.report.Feature(capability.HardwareCounters), perf.Probe))

	cfg := &config.Config{DefaultProfile: true}
	if f.configFile != "" {
		b, err := safeopen.ReadInput("--config.file", f.configFile, safeopen.YAML, nil)
		if err == nil {
			cfg, err = config.Parse(f.configFile, b)
		}
		if err != nil {
			s.configErrors = append(s.configErrors, unjoin(err)...)
			if cfg == nil {
				cfg = &config.Config{DefaultProfile: true}
			}
		}
	}
	var groups []config.Group
	if cfg.DefaultProfile {
		hw := s.report.Feature(capability.HardwareCounters).Available
		groups = profile.Default(hw)
		if hw && f.infoEvents {
			groups = append(groups, profile.Info()...)
			groups = append(groups, treeInfo(f.tree.uarch, s)...)
		}
	}
	groups = append(groups, cfg.Groups...)
	specs, err := profile.Build(groups, pmus)
	s.configErrors = append(s.configErrors, unjoin(err)...)
	s.groups = specs
	if note := fdNote(specs, s.facts.OnlineCPUs); note != "" {
		s.report.Notes = append(s.report.Notes, note)
	}
	return s
}

// fdNote warns when the groups need more file descriptors (one per event per CPU)
// than the open-file limit allows, before the kernel refuses them one by one.
func fdNote(groups []perfcount.GroupSpec, online []int) string {
	need := 0
	for _, g := range groups {
		cpus := len(online)
		if c := g.CPUs(); c != nil {
			cpus = 0
			for _, cpu := range c {
				if slices.Contains(online, cpu) {
					cpus++
				}
			}
		}
		need += len(g.Events) * cpus
	}
	limit, err := rlimit.OpenFiles()
	if err != nil {
		return ""
	}
	const reserve = 64 // listeners, scrapes, /proc and /sys reads
	if uint64(need+reserve) <= limit {
		return ""
	}
	return fmt.Sprintf("the event groups need %d file descriptors (one per event per CPU) but the open-file limit is %d: raise it (ulimit -n, LimitNOFILE=, or the container's nofile rlimit) or count fewer events",
		need, limit)
}

// raiseMemlock lifts the locked-memory limit as far as the process may,
// before any ring, AUX area or BPF map is made (rlimit.RaiseMemlock), and
// says what it did.
func raiseMemlock(logger *slog.Logger, ipcLock bool) {
	from, to, err := rlimit.RaiseMemlock()
	switch {
	case err != nil && ipcLock:
		// CAP_IPC_LOCK exempts perf rings and BPF maps from the limit: not
		// raising it (no CAP_SYS_RESOURCE) costs nothing.
		logger.Debug("locked-memory limit unchanged (no CAP_SYS_RESOURCE); CAP_IPC_LOCK exempts perf rings and BPF maps from it", "limit", rlimit.KiB(from))
	case err != nil:
		logger.Info("locked-memory limit unchanged: perf rings beyond kernel.perf_event_mlock_kb need CAP_IPC_LOCK, or CAP_SYS_RESOURCE to raise it", "limit", rlimit.KiB(from), "err", err)
	case from != to:
		logger.Info("locked-memory limit raised, for perf rings beyond kernel.perf_event_mlock_kb", "from", rlimit.KiB(from), "to", rlimit.KiB(to))
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
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
			return nil, fmt.Errorf("the %s tree needs hardware counters: %s", t.Uarch, s.report.Feature(capability.HardwareCounters).Reason)
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

// Pipeline is what serve exports: its collectors, the loop that feeds them,
// whether its first values are in, and what to release at the end.
type Pipeline struct {
	// parts are the exporter collectors, each with the collector that
	// built it (pmu_scrape_stale_total's part).
	parts   []part
	run     func(ctx context.Context)
	ready   func() (bool, string)
	closers []func()
	// startPods starts the pod-name informer (nil without the API).
	startPods func(ctx context.Context)
	// handlers are extra endpoints (/debug/cachelines).
	handlers []Handler
	// cpuResets hear of CPUs whose events the counting engine reopened.
	cpuResets []func(cpu int)
	// step plays one recorded interval (replay only), as run does on its
	// clock: the golden exposition test plays a fixed number.
	step func()
	// health hears of every collector's cycles (pmu_collector_*).
	health *exporter.Health
	// beside run with run until ctx ends (the sampler's reader); run
	// returns once they have, so that closers never pull a ring from under
	// its reader.
	beside []func(ctx context.Context)
	// self is what the exporter costs (live only; nil in replay).
	self *exporter.SelfCost
}

// WrapMetrics counts what each scrape of h costs the exporter (its
// process CPU time while serving it) into pmu_self_*.
func (p *Pipeline) WrapMetrics(h http.Handler) http.Handler {
	if p.self == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := selftest.ProcessCPU()
		h.ServeHTTP(w, r)
		p.self.AddScrape(uint64(max(selftest.ProcessCPU()-t0, 0)))
	})
}

// Close releases what the collectors hold, in the reverse order.
func (p *Pipeline) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// part is an exporter collector and the collector that built it.
type part struct {
	name string
	c    prometheus.Collector
}

// add exports c as part of the named collector.
func (p *Pipeline) add(name string, c prometheus.Collector) {
	p.parts = append(p.parts, part{name, c})
}

// NewRegistry holds the pipeline's collectors and the exporter's own: build
// information, the Go runtime and the process. Each collector's metrics
// are collected within timeout (exporter.Bounded; 0: unbounded, as tests
// that gather once may ask), so that a scrape never waits on a
// collector whose source is held up.
func NewRegistry(p *Pipeline, timeout time.Duration) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	stale := exporter.NewStaleScrapes()
	for _, pt := range p.parts {
		if timeout > 0 {
			reg.MustRegister(exporter.NewBounded(pt.c, pt.name, timeout, stale))
		} else {
			reg.MustRegister(pt.c)
		}
	}
	if timeout > 0 {
		reg.MustRegister(stale)
	}
	reg.MustRegister(
		versioncollector.NewCollector("pmu"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// measuring says whether any group is open on any CPU, or why none is: a
// pod that measures nothing is alive (/-/healthy) but not ready.
func measuring(s perfcount.Snapshot) (bool, string) {
	reasons := map[string]int{}
	for _, g := range s.Groups {
		if g.OpenCPUs > 0 {
			return true, ""
		}
		for r, n := range g.Failures {
			reasons[string(r)] += n
		}
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%s on %d group CPUs", r, reasons[r]))
	}
	return false, "no event group could be opened (" + cmp.Or(strings.Join(parts, ", "), "no group configured") + "); see pmu_group_open_failures and pmu_exporter check"
}

// Run feeds the collectors until ctx ends.
func (p *Pipeline) Run(ctx context.Context) { p.run(ctx) }

// Stuck names the collectors with a cycle that has run longer than bound,
// with how long (exporter.Health.Stuck): /-/healthy fails on any.
func (p *Pipeline) Stuck(bound time.Duration) map[string]time.Duration {
	if p.health == nil {
		return nil
	}
	return p.health.Stuck(time.Now(), bound)
}

// FreeFDs is how many more file descriptors the process may open now
// under its open-file limit, and that limit; false where either is not
// known or there is no limit.
func (p *Pipeline) FreeFDs() (free int64, limit uint64, ok bool) {
	limit, err := rlimit.OpenFiles()
	if err != nil || limit == rlimit.Unlimited {
		return 0, limit, false
	}
	open, err := rlimit.OpenFDs()
	if err != nil {
		return 0, limit, false
	}
	return int64(limit) - int64(open), limit, true
}

// Ready says whether the first values are in, or why not.
func (p *Pipeline) Ready() (bool, string) { return p.ready() }

// StartPods starts the pod-name informer, where there is one.
func (p *Pipeline) StartPods(ctx context.Context) {
	if p.startPods != nil {
		p.startPods(ctx)
	}
}

// Handlers are the extra endpoints (served only with --web.enable-debug).
func (p *Pipeline) Handlers() []Handler { return p.handlers }

// hasHandler says whether a collector already serves path.
func (p *Pipeline) hasHandler(path string) bool {
	for _, h := range p.handlers {
		if h.Path == path {
			return true
		}
	}
	return false
}

// Build puts the pipeline together from this host's counters, or from a
// recording with --source=replay.
func Build(o Options, logger *slog.Logger) (*Pipeline, error) {
	if o.source == "replay" {
		return replayPipeline(o, logger)
	}
	return livePipeline(o, logger), nil
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

// tscWindow is how long measureTSC counts the TSC: a fifth of a second
// gives its rate to a few parts per million.
const tscWindow = 200 * time.Millisecond

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
