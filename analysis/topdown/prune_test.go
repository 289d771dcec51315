package topdown

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
)

// Pruned to level 2, the skx tree counts what it counted before level 3
// was written (its first 17 events, in four groups: the file's first
// four) and computes the same levels 1 and 2 as the whole tree; pruned to
// level 3 it has Intel's 25 level-3 nodes, the level-4 nodes they rest on
// hidden.
func TestPruneSKXLevels(t *testing.T) {
	full, err := Builtin("skx")
	if err != nil {
		t.Fatal(err)
	}
	two, err := full.Prune(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(two.Events), names(full.Events[:17]); !slices.Equal(got, want) {
		t.Errorf("level 2 counts %v, want %v", got, want)
	}
	if len(two.Groups) != 4 || !slices.EqualFunc(two.Groups, full.Groups[:4], slices.Equal) {
		t.Errorf("level 2 groups %v, want the first four", two.Groups)
	}
	wholeTree, err := full.Compile()
	if err != nil {
		t.Fatal(err)
	}
	twoTree, err := two.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range twoTree.Metrics() {
		if m.Level > 2 {
			t.Errorf("level 2 has %s at level %d", m.Name, m.Level)
		}
	}
	whole, cut := wholeTree.NewEvaluator(), twoTree.NewEvaluator()
	rng := rand.New(rand.NewPCG(2, 3))
	for trial := range 50 {
		in := fillRandom(wholeTree, whole, rng, map[string]float64{"smt_on": float64(trial % 2)}, false)
		cut.Reset()
		for name, v := range in {
			if i := twoTree.Input(name); i >= 0 {
				cut.Set(i, v)
			}
		}
		cut.Set(twoTree.Input("smt_on"), float64(trial%2))
		whole.Eval()
		cut.Eval()
		for _, m := range twoTree.Metrics() {
			if m.Level > 0 && whole.Value(m.Name) != cut.Value(m.Name) {
				t.Fatalf("%s: %v pruned, %v whole", m.Name, cut.Value(m.Name), whole.Value(m.Name))
			}
		}
	}
	three, err := full.Prune(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	levels := map[int]int{}
	for _, m := range three.Metrics {
		levels[m.Level]++
		if m.Level == 0 && m.Name == "fp_scalar" && (m.Parent != "" || m.Threshold != "") {
			t.Errorf("hidden helper fp_scalar keeps its parent or threshold: %+v", m)
		}
	}
	if levels[3] != 25 || levels[4] != 0 || levels[2] != 8 || levels[1] != 4 {
		t.Errorf("level 3 has nodes by level %v, want 4, 8 and 25", levels)
	}
	if _, err := three.Compile(); err != nil {
		t.Fatal(err)
	}
}

// With nodes named, as toplev --nodes: level 1 whole, and below it only the
// named subtrees and their ancestors; only their events are counted.
func TestPruneToNodes(t *testing.T) {
	full, _ := Builtin("skx")
	d, err := full.Prune(3, []string{"memory_bound", "fetch_latency"})
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, m := range d.Metrics {
		if m.Level > 0 {
			shown = append(shown, m.Name)
		}
	}
	slices.Sort(shown)
	want := []string{"backend_bound", "bad_speculation", "branch_resteers", "dram_bound", "dsb_switches", "fetch_latency", "frontend_bound",
		"icache_misses", "itlb_misses", "l1_bound", "l2_bound", "l3_bound", "lcp", "memory_bound", "ms_switches", "retiring", "store_bound"}
	if !slices.Equal(shown, want) {
		t.Errorf("nodes %v, want %v", shown, want)
	}
	for _, e := range d.Events {
		if strings.HasPrefix(e.Name, "IDQ.DSB") || strings.HasPrefix(e.Name, "FP_ARITH") || e.Name == "ARITH.DIVIDER_ACTIVE" {
			t.Errorf("counts %s, which no chosen node needs", e.Name)
		}
	}
	if _, err := d.Compile(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		level int
		nodes []string
		want  string
	}{
		{3, []string{"l4_bound"}, `no node "l4_bound"`},
		{2, []string{"l1_bound"}, "node l1_bound is at level 3, below the level asked for (2)"},
		{3, []string{"slots"}, `no node "slots"`},
	} {
		if _, err := full.Prune(c.level, c.nodes); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Prune(%d, %v): %v, want %q", c.level, c.nodes, err, c.want)
		}
	}
}

func names(evs []metric.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name)
	}
	return out
}

// Intel's level-3 nodes are separate estimates, not a partition of their
// parent: on random counts their sums are not counted as containment
// violations (levels 1 and 2 and fp_arith's partition are still held).
func TestLevel3IsNotHeldToContainment(t *testing.T) {
	full, _ := Builtin("skx")
	three, err := full.Prune(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := three.Compile()
	if err != nil {
		t.Fatal(err)
	}
	ev := tr.NewEvaluator()
	rng := rand.New(rand.NewPCG(4, 4))
	for range 20 {
		fillRandom(tr, ev, rng, map[string]float64{"smt_on": 0}, false)
		ev.Eval()
	}
	if len(ev.Violations) != 0 {
		t.Errorf("containment violations %v on random counts", ev.Violations)
	}
	for _, m := range three.Metrics {
		if m.Level == 2 && !m.ChildrenEstimated || m.Level == 1 && m.ChildrenEstimated {
			t.Errorf("%s (level %d): children estimated %v", m.Name, m.Level, m.ChildrenEstimated)
		}
	}
}

// Pruned to level 2, the icx tree counts what it did before level 3 was
// written: its first 21 events, without the smt_on param level 3's core
// cycles need, in its first five groups (the fourth without the cycles
// that level 3's store_bound divides by); icl is the icx tree with its
// own override of level 3 (dram_bound for l3_miss_bound, and lsd).
func TestPruneICXLevel2(t *testing.T) {
	full, err := Builtin("icx")
	if err != nil {
		t.Fatal(err)
	}
	two, err := full.Prune(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(two.Events), names(full.Events[:21]); !slices.Equal(got, want) {
		t.Errorf("level 2 counts %v, want %v", got, want)
	}
	if len(two.Params) != 0 || !slices.Equal(full.Params, []string{"smt_on", "SYSTEM_TSC_FREQ", "DURATIONTIMEINMILLISECONDS"}) {
		t.Errorf("params %v at level 2, %v in all", two.Params, full.Params)
	}
	want := slices.Clone(full.Groups[:5])
	want[3] = slices.DeleteFunc(slices.Clone(want[3]), func(e string) bool { return e == "CPU_CLK_UNHALTED.THREAD" })
	if !slices.EqualFunc(two.Groups, want, slices.Equal) {
		t.Errorf("level 2 groups %v, want %v", two.Groups, want)
	}
	icl, err := Builtin("icl")
	if err != nil {
		t.Fatal(err)
	}
	if icl.Levels() != 6 || full.Levels() != 6 || slices.ContainsFunc(icl.Metrics, func(m metric.Metric) bool { return m.Name == "l3_miss_bound" }) {
		t.Errorf("icl goes to level %d, icx to %d; icl keeps icx's l3_miss_bound: %v", icl.Levels(), full.Levels(), icl.Metrics)
	}
}

// Pruned to level 2, the spr tree counts its PERF_METRICS group alone, as
// before level 3 was written, and srf its two groups; Emerald Rapids goes
// on to level 6 (Intel's deepest, generated in defs/deep), and so do
// Granite Rapids and Alder Lake, whose different nodes their override
// files replace, add or drop; the E-cores' trees stop at 3.
func TestPruneSPRLevel2(t *testing.T) {
	full, err := Builtin("spr")
	if err != nil {
		t.Fatal(err)
	}
	two, err := full.Prune(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(two.Events), names(full.Events[:10]); !slices.Equal(got, want) || len(two.Groups) != 1 || len(two.Params) != 0 {
		t.Errorf("level 2 counts %v in %d groups with params %v, want %v in one", got, len(two.Groups), two.Params, want)
	}
	gnr, _ := Builtin("gnr")
	if two, err := gnr.Prune(2, nil); err != nil || !slices.Equal(names(two.Events), names(full.Events[:10])) || len(two.Groups) != 1 {
		t.Errorf("gnr at level 2: %v in %v (%v)", names(two.Events), two.Groups, err)
	}
	srf, _ := Builtin("srf")
	if two, err := srf.Prune(2, nil); err != nil || !slices.Equal(names(two.Events), names(srf.Events[:10])) || !slices.EqualFunc(two.Groups, srf.Groups[:2], slices.Equal) {
		t.Errorf("srf at level 2: %v in %v (%v)", names(two.Events), two.Groups, err)
	}
	grt, _ := Builtin("grt")
	if two, err := grt.Prune(2, nil); err != nil || !slices.Equal(names(two.Events), names(grt.Events[:9])) || !slices.EqualFunc(two.Groups, grt.Groups[:2], slices.Equal) {
		t.Errorf("grt at level 2: %v in %v (%v)", names(two.Events), two.Groups, err)
	}
	for uarch, want := range map[string]int{"spr": 6, "emr": 6, "gnr": 6, "adl": 6, "srf": 3, "grt": 3} {
		d, err := Builtin(uarch)
		if err != nil || d.Levels() != want {
			t.Errorf("%s goes to level %d (%v), want %d", uarch, d.Levels(), err, want)
		}
	}
}

// slots, the denominator every fraction is exported against, is kept with
// its events even where no node's formula uses them (a tree of constant
// fractions, as softwareTree).
func TestPruneKeepsSlots(t *testing.T) {
	d, err := metric.Parse("software.yaml", []byte(softwareTree))
	if err != nil {
		t.Fatal(err)
	}
	cut, err := d.Prune(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cut.Events); !slices.Equal(got, []string{"CLOCK"}) || len(cut.Metrics) != 5 || !slices.EqualFunc(cut.Groups, [][]string{{"CLOCK"}}, slices.Equal) {
		t.Errorf("events %v, %d metrics, groups %v; want CLOCK, slots and the four nodes", got, len(cut.Metrics), cut.Groups)
	}
}
