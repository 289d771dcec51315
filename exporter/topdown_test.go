package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pmu-exporter/pmu_exporter/topdown"
)

type fixedTopdown struct{}

func (fixedTopdown) Totals() (float64, []topdown.Node, map[string]uint64) {
	return 4000, []topdown.Node{
		{Name: "frontend_bound", Level: 1, Slots: 800},
		{Name: "fetch_latency", Level: 2, Parent: "frontend_bound", Slots: 600},
	}, map[string]uint64{"frontend_bound": 2}
}

func TestTopdownCollector(t *testing.T) {
	c := NewTopdown(fixedTopdown{}, TopdownInfo{Uarch: "spr", Source: "perf_metrics", SMT: "on"})
	want := `
# HELP pmu_slots_total Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.
# TYPE pmu_slots_total counter
pmu_slots_total 4000
# HELP pmu_topdown_slots_total Slots attributed to a Top-Down node: its fraction times the interval's slots, accumulated over intervals and CPUs.
# TYPE pmu_topdown_slots_total counter
pmu_topdown_slots_total{category="fetch_latency",level="2",parent="frontend_bound"} 600
pmu_topdown_slots_total{category="frontend_bound",level="1",parent=""} 800
# HELP pmu_topdown_info The Top-Down tree in use, always 1.
# TYPE pmu_topdown_info gauge
pmu_topdown_info{smt="on",source="perf_metrics",uarch="spr"} 1
# HELP pmu_topdown_containment_violations_total Intervals, summed over CPUs, in which a node's children did not add up to it; never clamped away.
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
