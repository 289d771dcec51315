package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
)

type fixedTopdown struct{}

func (f fixedTopdown) Totals() (float64, []topdown.Node, map[string]uint64) {
	return 4000, []topdown.Node{
		{Name: "frontend_bound", Level: 1, Slots: 800},
		{Name: "fetch_latency", Level: 2, Parent: "frontend_bound", Slots: 600},
	}, map[string]uint64{"frontend_bound": 2}
}

// Two CPUs: 1000 + 3000 slots, 200 + 600 frontend-bound, 100 + 500 fetch latency.
func (fixedTopdown) TotalsPerCPU() (map[int]float64, map[int][]topdown.Node, map[string]uint64) {
	return map[int]float64{0: 1000, 1: 3000}, map[int][]topdown.Node{
		0: {{Name: "frontend_bound", Level: 1, Slots: 200}, {Name: "fetch_latency", Level: 2, Parent: "frontend_bound", Slots: 100}},
		1: {{Name: "frontend_bound", Level: 1, Slots: 600}, {Name: "fetch_latency", Level: 2, Parent: "frontend_bound", Slots: 500}},
	}, map[string]uint64{"frontend_bound": 2}
}

func TestTopdownCollector(t *testing.T) {
	c := NewTopdown([]TopdownTree{{fixedTopdown{}, TopdownInfo{Uarch: "spr", Source: "perf_metrics", SMT: "on"}}}, false)
	want := `
# HELP pmu_slots_total Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.
# TYPE pmu_slots_total counter
pmu_slots_total 4000
# HELP pmu_topdown_slots_total Slots attributed to a Top-Down node: its fraction times the interval's slots, accumulated over intervals and CPUs.
# TYPE pmu_topdown_slots_total counter
pmu_topdown_slots_total{category="fetch_latency",level="2",parent="frontend_bound"} 600
pmu_topdown_slots_total{category="frontend_bound",level="1",parent=""} 800
# HELP pmu_topdown_info The Top-Down tree in use (one per core type on hybrid hosts), always 1.
# TYPE pmu_topdown_info gauge
pmu_topdown_info{smt="on",source="perf_metrics",uarch="spr"} 1
# HELP pmu_topdown_containment_violations_total Intervals, summed over CPUs, in which a node's children did not add up to it; never clamped away. Not for a node whose children are separate estimates (Intel's levels 3 and deeper), which need not add up.
# TYPE pmu_topdown_containment_violations_total counter
pmu_topdown_containment_violations_total{parent="frontend_bound"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

func TestTopdownCollectorPerCPU(t *testing.T) {
	c := NewTopdown([]TopdownTree{{fixedTopdown{}, TopdownInfo{Uarch: "spr", Source: "perf_metrics", SMT: "on"}}}, true)
	want := `
# HELP pmu_slots_total Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.
# TYPE pmu_slots_total counter
pmu_slots_total{cpu="0"} 1000
pmu_slots_total{cpu="1"} 3000
# HELP pmu_topdown_slots_total Slots attributed to a Top-Down node: its fraction times the interval's slots, accumulated over intervals and CPUs.
# TYPE pmu_topdown_slots_total counter
pmu_topdown_slots_total{category="fetch_latency",cpu="0",level="2",parent="frontend_bound"} 100
pmu_topdown_slots_total{category="fetch_latency",cpu="1",level="2",parent="frontend_bound"} 500
pmu_topdown_slots_total{category="frontend_bound",cpu="0",level="1",parent=""} 200
pmu_topdown_slots_total{category="frontend_bound",cpu="1",level="1",parent=""} 600
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pmu_slots_total", "pmu_topdown_slots_total"); err != nil {
		t.Error(err)
	}
}

// eCores is a Gracemont tree on CPUs 4 and 5: 500 + 500 slots, 100 + 150
// frontend-bound, no fetch_latency split reported, and a resource_bound node the
// P-core tree does not have.
type eCores struct{}

func (eCores) Totals() (float64, []topdown.Node, map[string]uint64) {
	return 1000, []topdown.Node{
		{Name: "frontend_bound", Level: 1, Slots: 250},
		{Name: "resource_bound", Level: 2, Parent: "backend_bound", Slots: 300},
	}, map[string]uint64{"backend_bound": 1, "frontend_bound": 0}
}

func (eCores) TotalsPerCPU() (map[int]float64, map[int][]topdown.Node, map[string]uint64) {
	return map[int]float64{4: 500, 5: 500}, map[int][]topdown.Node{
		4: {{Name: "frontend_bound", Level: 1, Slots: 100}, {Name: "resource_bound", Level: 2, Parent: "backend_bound", Slots: 120}},
		5: {{Name: "frontend_bound", Level: 1, Slots: 150}, {Name: "resource_bound", Level: 2, Parent: "backend_bound", Slots: 180}},
	}, map[string]uint64{"backend_bound": 1}
}

// A hybrid host: the P-core and E-core trees' counters add up, node by node, so
// sum(rate(topdown)) / sum(rate(slots)) weighs each core type by its slots.
func TestTopdownCollectorHybrid(t *testing.T) {
	trees := []TopdownTree{
		{fixedTopdown{}, TopdownInfo{Uarch: "adl", Source: "perf_metrics", SMT: "on"}},
		{eCores{}, TopdownInfo{Uarch: "grt", Source: "events", SMT: "n/a"}},
	}
	want := `
# HELP pmu_slots_total Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.
# TYPE pmu_slots_total counter
pmu_slots_total 5000
# HELP pmu_topdown_slots_total Slots attributed to a Top-Down node: its fraction times the interval's slots, accumulated over intervals and CPUs.
# TYPE pmu_topdown_slots_total counter
pmu_topdown_slots_total{category="fetch_latency",level="2",parent="frontend_bound"} 600
pmu_topdown_slots_total{category="frontend_bound",level="1",parent=""} 1050
pmu_topdown_slots_total{category="resource_bound",level="2",parent="backend_bound"} 300
# HELP pmu_topdown_info The Top-Down tree in use (one per core type on hybrid hosts), always 1.
# TYPE pmu_topdown_info gauge
pmu_topdown_info{smt="on",source="perf_metrics",uarch="adl"} 1
pmu_topdown_info{smt="n/a",source="events",uarch="grt"} 1
# HELP pmu_topdown_containment_violations_total Intervals, summed over CPUs, in which a node's children did not add up to it; never clamped away. Not for a node whose children are separate estimates (Intel's levels 3 and deeper), which need not add up.
# TYPE pmu_topdown_containment_violations_total counter
pmu_topdown_containment_violations_total{parent="backend_bound"} 1
pmu_topdown_containment_violations_total{parent="frontend_bound"} 2
`
	if err := testutil.CollectAndCompare(NewTopdown(trees, false), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	wantCPU := `
# HELP pmu_slots_total Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.
# TYPE pmu_slots_total counter
pmu_slots_total{cpu="0"} 1000
pmu_slots_total{cpu="1"} 3000
pmu_slots_total{cpu="4"} 500
pmu_slots_total{cpu="5"} 500
`
	if err := testutil.CollectAndCompare(NewTopdown(trees, true), strings.NewReader(wantCPU), "pmu_slots_total"); err != nil {
		t.Error(err)
	}
}

// skippingTopdown also says which values it left out.
type skippingTopdown struct{ fixedTopdown }

func (skippingTopdown) NotComputed() map[topdown.NotComputed]uint64 {
	return map[topdown.NotComputed]uint64{{Node: "frontend_bound", Reason: topdown.ReasonNegative}: 3, {Node: "slots", Reason: topdown.ReasonDivisionByZero}: 1}
}

func TestTopdownNotComputed(t *testing.T) {
	c := NewTopdown([]TopdownTree{{skippingTopdown{}, TopdownInfo{Uarch: "user"}}}, false)
	want := `
# HELP pmu_topdown_not_computed_intervals_total Intervals, summed over CPUs, whose value of a node was left out of its counter: negative (a counter never goes down) or a division by zero with every input counted.
# TYPE pmu_topdown_not_computed_intervals_total counter
pmu_topdown_not_computed_intervals_total{category="frontend_bound",reason="negative"} 3
pmu_topdown_not_computed_intervals_total{category="slots",reason="division_by_zero"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pmu_topdown_not_computed_intervals_total"); err != nil {
		t.Error(err)
	}
}
