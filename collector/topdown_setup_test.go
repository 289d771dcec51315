package collector

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/plan/profile"
)

// fixtureSetup is what discover would find on a fixture host whose hardware
// counters work.
func fixtureSetup(t *testing.T, h fixture.Host) (Options, setup) {
	sysfs, procfs := fixture.Write(t, h)
	f := Options{sysfs: sysfs, procfs: procfs, tree: treeFlags{enabled: true, level: 2, cgroupLevel: 2}} // serve's defaults
	s := setup{pmus: fixture.PMUs(t, h), facts: host.Read(procfs, sysfs)}
	s.report.Features = []capability.Feature{{Name: capability.HardwareCounters, Available: true}}
	s.report.Counters = host.Counters{GeneralPurpose: 8, Known: true}
	return f, s
}

// On an Alder Lake hybrid, serve runs the P-core tree on CPUs 0-3 and the
// Gracemont tree on CPUs 4-7, each from its own core PMU.
func TestSetupTopdownHybrid(t *testing.T) {
	f, s := fixtureSetup(t, fixture.IntelAlderLake())
	td, err := setupTopdown(f.tree, f.sysfs, s)
	if err != nil {
		t.Fatal(err)
	}
	var uarchs []string
	for _, tr := range td.trees {
		uarchs = append(uarchs, tr.Info.Uarch+"/"+tr.Info.Source)
	}
	if !slices.Equal(uarchs, []string{"adl/perf_metrics", "grt/events"}) {
		t.Errorf("trees %v", uarchs)
	}
	for _, g := range td.groups {
		want, pmuType := []int{0, 1, 2, 3}, uint32(4)
		if strings.HasPrefix(g.Name, "topdown/grt/") {
			want, pmuType = []int{4, 5, 6, 7}, 10
		}
		if !slices.Equal(g.CPUs(), want) {
			t.Errorf("%s counts on CPUs %v, want %v", g.Name, g.CPUs(), want)
		}
		for _, e := range g.Events {
			if e.Attr.Type != pmuType {
				t.Errorf("%s: %s has PMU type %d, want %d", g.Name, e.Name, e.Attr.Type, pmuType)
			}
		}
	}
	if len(td.groups) != 3 || len(td.warnings) != 0 {
		t.Errorf("%d groups, warnings %v; want adl's 1 and grt's 2, fitting", len(td.groups), td.warnings)
	}

	// Two trees on one core type would count its slots twice.
	f.tree.uarch = "spr,adl"
	if _, err := setupTopdown(f.tree, f.sysfs, s); err == nil || !strings.Contains(err.Error(), "both count on the same CPUs") {
		t.Errorf("spr,adl: %v", err)
	}
	// A chosen E-core tree goes on the E-cores.
	f.tree.uarch = "grt"
	td, err = setupTopdown(f.tree, f.sysfs, s)
	if err != nil || len(td.groups) != 2 || !slices.Equal(td.groups[0].CPUs(), []int{4, 5, 6, 7}) {
		t.Errorf("grt alone: %v %+v", err, td)
	}
}

// On a Skylake-SP, --collector.topdown.level 3 adds level 3's groups to
// level 2's four, and the cgroups get level 2 (--collector.topdown.
// cgroup-level), a tree over a subset of the inputs; --collector.topdown.
// nodes keeps only the groups the named subtrees need.
func TestSetupTopdownLevels(t *testing.T) {
	h := fixture.IntelSkylake()
	h["sys/devices/system/cpu/smt/active"] = "0\n"
	f, s := fixtureSetup(t, h)
	levels := func(o treeFlags) (groups int, deepest, cgroupDeepest int, cgroupInputsCounted bool) {
		t.Helper()
		td, err := setupTopdown(o, f.sysfs, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range td.targets[0].tree.Metrics() {
			deepest = max(deepest, m.Level)
		}
		for _, m := range td.targets[0].cgroupTree.Metrics() {
			cgroupDeepest = max(cgroupDeepest, m.Level)
		}
		cgroupInputsCounted = true
		for _, in := range td.targets[0].cgroupTree.Inputs {
			cgroupInputsCounted = cgroupInputsCounted && td.targets[0].tree.Input(in) >= 0
		}
		return len(td.groups), deepest, cgroupDeepest, cgroupInputsCounted
	}
	o := f.tree
	o.level, o.cgroupLevel = 2, 2
	if g, d, cd, ok := levels(o); g != 4 || d != 2 || cd != 2 || !ok {
		t.Errorf("level 2: %d groups, levels %d and %d for cgroups (inputs counted %v)", g, d, cd, ok)
	}
	o.level = 3
	if g, d, cd, ok := levels(o); g != 13 || d != 3 || cd != 2 || !ok {
		t.Errorf("level 3: %d groups, levels %d and %d for cgroups (inputs counted %v); want 13, 3 and 2", g, d, cd, ok)
	}
	o.nodes = []string{"memory_bound"}
	if g, d, cd, ok := levels(o); g != 6 || d != 3 || cd != 2 || !ok {
		t.Errorf("level 3 of memory_bound: %d groups, levels %d and %d for cgroups (inputs counted %v); want 6, 3 and 2", g, d, cd, ok)
	}
	// Levels 4 to 6 (Intel's, generated in defs/deep): every group of
	// skx.yaml (13) and of deep/skx.yaml (31), none redundant at this
	// depth, their core-frequency nodes given the TSC's rate, as measured.
	o.nodes, o.level = nil, 6
	s.tscHz = func() (float64, error) { return 2.1e9, nil }
	td, err := setupTopdown(o, f.sysfs, s)
	if err != nil {
		t.Fatal(err)
	}
	if p := td.targets[0].params; p[topdown.ParamTSC] != 2.1e9 || p[topdown.ParamDuration] != 1000 {
		t.Errorf("level 6 params %v, want the TSC's 2.1 GHz over 1000 ms", p)
	}
	if g, d, cd, ok := levels(o); g != 44 || d != 6 || cd != 2 || !ok {
		t.Errorf("level 6: %d groups, levels %d and %d for cgroups (inputs counted %v); want 44, 6 and 2", g, d, cd, ok)
	}
	s.tscHz = func() (float64, error) { return 0, errors.New("no msr/tsc/ here") }
	if _, err := setupTopdown(o, f.sysfs, s); err == nil || !strings.Contains(err.Error(), "no msr/tsc/ here") {
		t.Errorf("level 6 without the TSC's rate: %v", err)
	}
	o.level = 3
	o.nodes = []string{"no_such_node"}
	if _, err := setupTopdown(o, f.sysfs, s); err == nil || !strings.Contains(err.Error(), `no node "no_such_node"`) {
		t.Errorf("an unknown node: %v", err)
	}
}

// --collector.counting.info-events counts the Info events of the host's
// tree as one exported group: on a Skylake-SP Intel's MEM_LOAD_RETIRED.
// L1_MISS, L2_MISS and L3_MISS, resolved on its core PMU; on a Neoverse
// N1 Arm's L2D_CACHE_REFILL.
func TestTreeInfoGroups(t *testing.T) {
	h := fixture.IntelSkylake()
	_, s := fixtureSetup(t, h)
	groups := treeInfo("", s)
	if len(groups) != 1 || groups[0].Name != "info-skx" || len(groups[0].Events) != 3 {
		t.Fatalf("groups %+v, want info-skx with three events", groups)
	}
	specs, err := profile.Build(groups, s.pmus)
	if err != nil || len(specs) != 1 {
		t.Fatalf("%v %v", specs, err)
	}
	var names []string
	for _, e := range specs[0].Events {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"MEM_LOAD_RETIRED.L1_MISS", "MEM_LOAD_RETIRED.L2_MISS", "MEM_LOAD_RETIRED.L3_MISS"}) || specs[0].Events[1].Attr.Config != 0x10d1 {
		t.Errorf("events %v (L2_MISS config %#x)", names, specs[0].Events[1].Attr.Config)
	}
	// On an Alder Lake the P-cores' tree has them, on cpu_core (PMU type
	// 4) and its CPUs 0-3; the E-cores' has none.
	_, s = fixtureSetup(t, fixture.IntelAlderLake())
	groups = treeInfo("", s)
	if len(groups) != 1 || groups[0].Name != "info-adl" {
		t.Fatalf("hybrid: %+v", groups)
	}
	specs, err = profile.Build(groups, s.pmus)
	if err != nil || len(specs) != 1 || specs[0].Events[0].Attr.Type != 4 || !slices.Equal(specs[0].Events[0].CPUs, []int{0, 1, 2, 3}) {
		t.Errorf("hybrid: %+v %v", specs, err)
	}
	// On a Neoverse N1 (named: the fixture's facts carry no MIDR), the
	// level 2 data refills (PMUv3 event 0x17).
	_, s = fixtureSetup(t, fixture.ArmNeoverseN1())
	groups = treeInfo("neoverse", s)
	if len(groups) != 1 || groups[0].Name != "info-neoverse" {
		t.Fatalf("Neoverse: %+v", groups)
	}
	specs, err = profile.Build(groups, s.pmus)
	if err != nil || len(specs) != 1 || specs[0].Events[0].Name != "l2d_cache_refill" || specs[0].Events[0].Attr.Config != 0x17 {
		t.Errorf("Neoverse: %+v %v", specs, err)
	}
}
