package topdown

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
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

// A node whose events are all in a group other than the one its inputs
// are first read from is evaluated on that group's own counts, one counter
// schedule: FAULTS / CLOCK of group g1 (50 / 500), not FAULTS over g0's
// CLOCK (50 / 1000), times the interval's slots (g0's 1000). An interval
// in which g1 did not run leaves the node out, and is no division by zero.
func TestLiveEvaluatesANodeOnItsOwnGroup(t *testing.T) {
	_, tr := treetest.Compile(t, "t.yaml", softwareTree+"  - {name: faults_share, level: 1, formula: FAULTS / CLOCK}\n")
	groups := []eventspec.Group{{Name: "g0", Events: []eventspec.Event{{Name: "CLOCK"}}},
		{Name: "g1", Events: []eventspec.Event{{Name: "CLOCK"}, {Name: "FAULTS"}}}}
	live := NewLive(tr, groups, nil)
	snap := func(clock0, clock1, faults, run0, run1 uint64) model.Snapshot {
		return model.Snapshot{
			Events: []model.EventTotals{
				{Group: "g0", Event: "CLOCK", PerCPU: map[int]uint64{0: clock0}},
				{Group: "g1", Event: "CLOCK", PerCPU: map[int]uint64{0: clock1}},
				{Group: "g1", Event: "FAULTS", PerCPU: map[int]uint64{0: faults}},
			},
			Groups: []model.GroupTotals{{Name: "g0", RunningNS: map[int]uint64{0: run0}}, {Name: "g1", RunningNS: map[int]uint64{0: run1}}},
		}
	}
	live.Update(snap(1000, 500, 50, 10, 10))
	live.Update(snap(2000, 500, 50, 20, 10)) // g1 did not run
	slots, nodes, _ := live.Totals()
	share := math.NaN()
	for _, n := range nodes {
		if n.Name == "faults_share" {
			share = n.Slots
		}
	}
	if slots != 2000 || share != 100 {
		t.Errorf("slots %v, faults_share slots %v; want 2000 and 0.1 × 1000 of the first interval", slots, share)
	}
	if nc := live.NotComputed(); len(nc) != 0 {
		t.Errorf("not computed %v: g1 not running is a missing input, not a division by zero", nc)
	}
}

// At level 2 the Intel P-core trees read each non-approximate node's
// events from their first group already; the E-core and Zen trees put
// level 2 beside its own cycles in a second group, and those nodes are
// now evaluated there, as their groups were laid out for.
func TestLevel2HomeGroups(t *testing.T) {
	want := map[string]string{
		"srf":  "map[1:[fetch_latency fetch_bandwidth branch_mispredicts machine_clears]]",
		"grt":  "map[1:[fetch_latency fetch_bandwidth branch_mispredicts machine_clears]]",
		"zen4": "map[1:[retiring light_operations heavy_operations]]", "zen5": "map[1:[retiring light_operations heavy_operations]]",
	}
	for _, n := range Names() {
		d, err := Builtin(n)
		if err != nil {
			t.Fatal(err)
		}
		two, err := d.Prune(2, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := two.Compile()
		if err != nil {
			t.Fatal(err)
		}
		var groups []eventspec.Group
		source := map[string][2]string{}
		for i, g := range two.Groups {
			eg := eventspec.Group{Name: strconv.Itoa(i)}
			for _, e := range g {
				eg.Events = append(eg.Events, eventspec.Event{Name: e})
				if _, ok := source[e]; !ok {
					source[e] = [2]string{eg.Name, e}
				}
			}
			groups = append(groups, eg)
		}
		if homes := fmt.Sprint(homeGroups(tr, groups, source)); homes != cmp.Or(want[n], "map[]") {
			t.Errorf("%s at level 2: nodes evaluated on other groups: %v, want %v", n, homes, cmp.Or(want[n], "map[]"))
		}
	}
}
