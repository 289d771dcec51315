package topdown

import (
	"math"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/treetest"
)

// fourWide is a 4-slot tree whose fractions depend on the counts, so the
// expected slot counters can be worked out by hand.
const fourWide = `name: four
events:
  - {name: CYCLES, spec: cycles}
  - {name: UOPS, spec: instructions}
  - {name: FE, spec: branches}
groups:
  - [CYCLES, UOPS, FE]
metrics:
  - {name: slots, level: 0, formula: 4 * CYCLES}
  - {name: retiring, level: 1, formula: UOPS / slots}
  - {name: frontend_bound, level: 1, formula: FE / slots}
  - {name: backend_bound, level: 1, formula: 1 - retiring - frontend_bound}
`

func TestKeyedHandComputed(t *testing.T) {
	_, tr := treetest.Compile(t, "four.yaml", fourWide)
	// Counts arrive in the attribution's order, with an event the tree does not read.
	events := []string{"FE", "other", "CYCLES", "UOPS"}
	k := NewKeyed(tr, events, nil)
	if m := k.Missing(events); len(m) != 0 {
		t.Errorf("missing %v", m)
	}
	if m := k.Missing(events[:2]); len(m) != 2 {
		t.Errorf("without CYCLES and UOPS: missing %v", m)
	}
	nan := math.NaN()
	k.Add(1, []float64{40, 7, 100, 200}) // slots 400: retiring 200, frontend 40, backend 160
	k.Add(2, []float64{0, 7, 10, 10})    // slots 40: retiring 10, frontend 0, backend 30
	k.Add(1, []float64{100, 7, 50, 20})  // slots 200: retiring 20, frontend 100, backend 80
	k.Add(1, []float64{5, 7, nan, 5})    // slots unknown: nothing added
	k.Add(1, []float64{5, 7, 0, 0})      // idle: nothing added
	k.Add(2, []float64{nan, 7, 10, 30})  // slots 40: retiring 30, frontend unknown, backend unknown
	want := map[uint64]map[string]float64{
		1: {"slots": 600, "retiring": 220, "frontend_bound": 140, "backend_bound": 240},
		2: {"slots": 80, "retiring": 40, "frontend_bound": 0, "backend_bound": 30},
	}
	for key, w := range want {
		slots, nodes, ok := k.Totals(key)
		if !ok || slots != w["slots"] {
			t.Errorf("key %d: slots %v (%v), want %v", key, slots, ok, w["slots"])
		}
		if len(nodes) != 3 {
			t.Fatalf("key %d: nodes %+v", key, nodes)
		}
		for _, n := range nodes {
			if math.Abs(n.Slots-w[n.Name]) > 1e-9 || n.Level != 1 {
				t.Errorf("key %d %s: %v slots at level %d, want %v", key, n.Name, n.Slots, n.Level, w[n.Name])
			}
		}
	}
	k.Forget(1)
	if _, _, ok := k.Totals(1); ok {
		t.Error("a forgotten key still has totals")
	}
	if _, _, ok := k.Totals(3); ok {
		t.Error("a key never added has totals")
	}
}

// A node none of whose intervals had its inputs (a recording whose cgroup
// columns lack FE) is left out of the totals, not reported as no slots;
// the nodes that were evaluated are there.
func TestKeyedLeavesOutWhatWasNeverEvaluated(t *testing.T) {
	_, tr := treetest.Compile(t, "four.yaml", fourWide)
	k := NewKeyed(tr, []string{"CYCLES", "UOPS", "FE"}, nil)
	nan := math.NaN()
	k.Add(1, []float64{100, 200, nan}) // slots 400, retiring 200; frontend and backend unknown
	k.Add(1, []float64{50, 100, nan})
	slots, nodes, ok := k.Totals(1)
	if !ok || slots != 600 || len(nodes) != 1 || nodes[0].Name != "retiring" || nodes[0].Slots != 300 {
		t.Errorf("slots %v (%v), nodes %+v: want 600 slots and retiring's 300 alone", slots, ok, nodes)
	}
}
