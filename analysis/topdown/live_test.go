package topdown

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/internal/treetest"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// softwareTree is a tree a user could write over software events: its slots are
// cpu-clock nanoseconds and its fractions fixed, so the expected slot counters
// follow from the kernel's own cpu-clock totals.
const softwareTree = `name: software
events:
  - {name: CLOCK, spec: cpu-clock}
  - {name: FAULTS, spec: page-faults}
groups:
  - [CLOCK, FAULTS]
metrics:
  - {name: slots, level: 0, formula: CLOCK}
  - {name: frontend_bound, level: 1, formula: "0.25"}
  - {name: backend_bound, level: 1, formula: "0.75"}
  - {name: memory_bound, level: 2, parent: backend_bound, formula: backend_bound * 0.5}
  - {name: core_bound, level: 2, parent: backend_bound, formula: backend_bound * 0.5}
`

func TestLiveOnRealSoftwareCounters(t *testing.T) {
	testenv.RequireRoot(t)
	d, tr := treetest.Compile(t, "software.yaml", softwareTree)
	groups, err := LiveGroups(d, treetest.HostPMUs(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || !groups[0].Hidden || groups[0].Events[0].Name != "CLOCK" {
		t.Fatalf("groups = %+v", groups)
	}
	before, err := host.OnlineCPUs("/sys")
	if err != nil {
		t.Fatal(err)
	}
	e := perfcount.New(perfcount.Options{Groups: groups, OnlineCPUs: host.NewOnlineCPUsReader("/sys").Read})
	defer e.Close()
	live := NewLive(tr, groups, nil)
	for i := 0; i < 4; i++ {
		e.Cycle()
		live.Update(e.Snapshot())
		time.Sleep(20 * time.Millisecond)
	}
	var clock float64
	for _, ev := range e.Snapshot().Events {
		if ev.Event == "CLOCK" {
			clock = float64(ev.Sum())
		}
	}
	slots, nodes, violations := live.Totals()
	if clock < float64(50*time.Millisecond) || slots != clock {
		t.Errorf("slots %v, kernel cpu-clock total %v", slots, clock)
	}
	want := map[string]float64{"frontend_bound": 0.25, "backend_bound": 0.75, "memory_bound": 0.375, "core_bound": 0.375}
	for _, n := range nodes {
		if math.Abs(n.Slots-want[n.Name]*slots) > 1e-9*slots {
			t.Errorf("%s: %v slots, want %v", n.Name, n.Slots, want[n.Name]*slots)
		}
	}
	if len(nodes) != 4 || len(violations) != 0 {
		t.Errorf("nodes %+v violations %v", nodes, violations)
	}
	// Per CPU: every CPU online throughout has its own slots, only CPUs
	// online at some point have any (another process may take one offline
	// meanwhile), and they add up to the total.
	after, err := host.OnlineCPUs("/sys")
	if err != nil {
		t.Fatal(err)
	}
	perCPU, byCPU, _ := live.TotalsPerCPU()
	sum := 0.0
	for cpu, s := range perCPU {
		sum += s
		if len(byCPU[cpu]) != 4 || byCPU[cpu][0].Slots != 0.25*s {
			t.Errorf("CPU %d: %v slots, nodes %+v", cpu, s, byCPU[cpu])
		}
		if !slices.Contains(before, cpu) && !slices.Contains(after, cpu) {
			t.Errorf("CPU %d has slots, and was online neither before nor after (%v, %v)", cpu, before, after)
		}
	}
	for _, cpu := range before {
		if _, ok := perCPU[cpu]; !ok && slices.Contains(after, cpu) {
			t.Errorf("CPU %d, online before and after, has no slots: %v", cpu, perCPU)
		}
	}
	if sum != slots {
		t.Errorf("per-CPU slots %v sum to %v, total %v", perCPU, sum, slots)
	}
}

func snapshot(clock, faults uint64, running uint64) model.Snapshot {
	return model.Snapshot{
		Events: []model.EventTotals{
			{Group: "g", Event: "CLOCK", PerCPU: map[int]uint64{0: clock}},
			{Group: "g", Event: "FAULTS", PerCPU: map[int]uint64{0: faults}},
		},
		Groups: []model.GroupTotals{{Name: "g", RunningNS: map[int]uint64{0: running}}},
	}
}

// An interval in which the group did not run adds nothing: no made-up zeros.
func TestLiveSkipsIntervalsWithoutValues(t *testing.T) {
	d, tr := treetest.Compile(t, "t.yaml", softwareTree+"  - {name: faults_share, level: 1, formula: FAULTS / CLOCK}\n")
	groups := []eventspec.Group{{Name: "g"}}
	for _, e := range d.Events {
		groups[0].Events = append(groups[0].Events, eventspec.Event{Name: e.Name})
	}
	live := NewLive(tr, groups, nil)
	live.Update(snapshot(1000, 10, 500))  // interval 1: 1000 slots, 10 faults
	live.Update(snapshot(1000, 10, 500))  // did not run: nothing
	live.Update(snapshot(3000, 110, 900)) // interval 3: 2000 slots, 100 faults
	slots, nodes, _ := live.Totals()
	if slots != 3000 {
		t.Errorf("slots = %v, want 3000", slots)
	}
	for _, n := range nodes {
		// faults_share slots = Σ (faults/clock)·clock = Σ faults = 110.
		if n.Name == "faults_share" && n.Slots != 110 {
			t.Errorf("faults_share slots = %v, want 110", n.Slots)
		}
	}
}

// When the engine splits a group that does not fit, Live follows the pieces.
func TestLiveFollowsSplitGroups(t *testing.T) {
	_, tr := treetest.Compile(t, "t.yaml", softwareTree)
	groups := []eventspec.Group{{Name: "g", Events: []eventspec.Event{{Name: "CLOCK"}, {Name: "FAULTS"}}}}
	live := NewLive(tr, groups, nil)
	split := func(clock, run uint64) model.Snapshot {
		return model.Snapshot{
			Events: []model.EventTotals{{Group: "g/CLOCK", Event: "CLOCK", PerCPU: map[int]uint64{0: clock}}},
			Groups: []model.GroupTotals{{Name: "g", Split: true}, {Name: "g/CLOCK", RunningNS: map[int]uint64{0: run}}},
		}
	}
	live.Update(split(1000, 10))
	live.Update(split(1500, 20))
	if slots, _, _ := live.Totals(); slots != 1500 {
		t.Errorf("slots = %v, want 1500 from the split group", slots)
	}
}

// A user's formula that evaluates negative would make its slot counter go
// down: the interval's value is left out and counted. A division by zero
// with every input counted is not computed (counted too), never a silent 0.
func TestLiveLeavesOutNegativeAndDivisionByZero(t *testing.T) {
	d, err := metric.Parse("user.yaml", []byte(softwareTree+
		"  - {name: negative, level: 1, formula: \"-5\"}\n"+
		"  - {name: by_zero, level: 1, formula: FAULTS / (CLOCK - CLOCK)}\n"+
		"  - {name: ratio_zero, level: 1, formula: \"d_ratio(FAULTS, CLOCK - CLOCK)\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := d.Compile()
	if err != nil {
		t.Fatal(err)
	}
	groups := []eventspec.Group{{Name: "g", Events: []eventspec.Event{{Name: "CLOCK"}, {Name: "FAULTS"}}}}
	live := NewLive(tr, groups, nil)
	live.Update(snapshot(1000, 10, 500))
	live.Update(snapshot(1000, 10, 500)) // did not run: a missing input, not a division by zero
	live.Update(snapshot(3000, 110, 900))
	_, nodes, _ := live.Totals()
	got := map[string]float64{}
	for _, n := range nodes {
		got[n.Name] = n.Slots
	}
	if got["negative"] != 0 || got["by_zero"] != 0 || got["ratio_zero"] != 0 || got["frontend_bound"] != 750 {
		t.Errorf("slot counters %v", got)
	}
	want := map[NotComputed]uint64{{"negative", ReasonNegative}: 2, {"by_zero", ReasonDivisionByZero}: 2}
	if nc := live.NotComputed(); len(nc) != len(want) || nc[NotComputed{"negative", ReasonNegative}] != 2 || nc[NotComputed{"by_zero", ReasonDivisionByZero}] != 2 {
		t.Errorf("not computed %v, want %v", nc, want)
	}
}
