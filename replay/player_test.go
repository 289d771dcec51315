package replay

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
)

func load(t *testing.T, path string) *Recording {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec, err := Load(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func skx(t *testing.T) *Player {
	t.Helper()
	def, err := topdown.Builtin("skx")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := def.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return NewPlayer(load(t, "testdata/skx-handmade.csv"), tree, map[string]float64{"smt_on": 0})
}

func nodeSlots(nodes []topdown.Node) map[string]float64 {
	out := map[string]float64{}
	for _, n := range nodes {
		out[n.Name] = n.Slots
	}
	return out
}

// The slots below are worked out by hand from skx's level-1 formulas with SMT
// off: slots = 4·CPU_CLK_UNHALTED.THREAD, frontend = IDQ_UOPS_NOT_DELIVERED.CORE,
// retiring = UOPS_RETIRED.RETIRE_SLOTS, bad speculation = issued − retired +
// 4·recovery cycles, backend = the rest (see the file's values).
func TestTopdownSlotsByHand(t *testing.T) {
	p := skx(t)
	p.Step()
	p.Step()
	slots, nodes, _ := p.Topdown().Totals()
	want := map[string]float64{"frontend_bound": 2600, "bad_speculation": 1000, "retiring": 8500, "backend_bound": 1900}
	if slots != 14000 {
		t.Errorf("slots %v, want 4000+2000 (interval 1) + 4000+4000 (interval 2)", slots)
	}
	got := nodeSlots(nodes)
	for name, w := range want {
		if math.Abs(got[name]-w) > 1e-9 {
			t.Errorf("%s: %v slots, want %v", name, got[name], w)
		}
	}
	perCPU, byCPU, _ := p.Topdown().TotalsPerCPU()
	if perCPU[0] != 8000 || perCPU[1] != 6000 || nodeSlots(byCPU[1])["frontend_bound"] != 1000 {
		t.Errorf("per CPU: %v %v", perCPU, byCPU)
	}

	// A container's inputs are summed over CPUs; CPU 1 did not count the
	// frontend event in the cgroup, which is not a zero: CPU 0's value stands.
	cg := p.Cgroups().Snapshot()
	if len(cg.Cgroups) != 1 || !cg.Cgroups[0].HasSlots || cg.Cgroups[0].Slots != 2000 {
		t.Fatalf("cgroups: %+v", cg.Cgroups)
	}
	c := cg.Cgroups[0]
	for name, w := range map[string]float64{"frontend_bound": 400, "bad_speculation": 200, "retiring": 1000, "backend_bound": 400} {
		if got := nodeSlots(c.Nodes)[name]; math.Abs(got-w) > 1e-9 {
			t.Errorf("cgroup %s: %v slots, want %v", name, got, w)
		}
	}
	if c.Identity.PodUID != "0b5b7a4e-1f0c-4b8e-9a51-3d2c1e0f9a77" || !strings.HasPrefix(c.Identity.ContainerID, "0123") {
		t.Errorf("identity %+v of %s", c.Identity, c.Path)
	}
	ns, pod, ctr, ok := p.Cgroups().Names(c.Identity)
	if !ok || ns != "shop" || pod != "checkout-7d9f" || ctr != "web" {
		t.Errorf("names from the # pod line: %q %q %q %v", ns, pod, ctr, ok)
	}
}

func TestCountsAndMultiplexing(t *testing.T) {
	p := skx(t)
	for range 2 {
		p.Step()
	}
	s := p.Snapshot()
	byEvent := map[string]int{}
	for i, e := range s.Events {
		byEvent[e.Event] = i
	}
	clk := s.Events[byEvent["CPU_CLK_UNHALTED.THREAD"]]
	// perf printed the event a second time in interval 2 on CPU 0 (9999): the
	// first value of each interval counts, as live.
	if clk.PerCPU[0] != 2000 || clk.PerCPU[1] != 1500 {
		t.Errorf("CPU_CLK_UNHALTED.THREAD per CPU %v, want 1000+1000 and 500+1000", clk.PerCPU)
	}
	g := s.Groups[byEvent["UOPS_ISSUED.ANY"]]
	if g.EnabledNS[0] != 2e9 || g.RunningNS[0] != 1e9 || g.EnabledNS[1] != 2e9 {
		t.Errorf("UOPS_ISSUED.ANY ran 50%% of two 1 s intervals: enabled %v running %v", g.EnabledNS, g.RunningNS)
	}
	// Looping: a third step replays interval 1 and the counters keep rising.
	p.Step()
	if got := p.Snapshot().Events[byEvent["CPU_CLK_UNHALTED.THREAD"]].PerCPU[0]; got != 3000 {
		t.Errorf("after looping: %d, want 3000", got)
	}
	if p.Cycles() != 3 {
		t.Errorf("cycles %d", p.Cycles())
	}
}

// cgroup.csv is perf 6.1's real -G output: the cgroup's task-clock, in msec,
// becomes ns as the kernel counts it.
func TestRecordedCgroups(t *testing.T) {
	rec := load(t, "../formats/perfstat/testdata/cgroup.csv")
	if !rec.PerCPU || !rec.Cgroups || len(rec.Intervals) != 3 {
		t.Fatalf("%+v", rec)
	}
	if rec.Intervals[0].Length != time.Duration(0.300463076*1e9) {
		t.Errorf("first interval %v", rec.Intervals[0].Length)
	}
	p := NewPlayer(rec, nil, nil)
	for range len(rec.Intervals) {
		p.Step()
	}
	got := map[string]map[string]float64{}
	for _, c := range p.Cgroups().Snapshot().Cgroups {
		got[c.Path] = map[string]float64{}
		for _, e := range c.Events {
			got[c.Path][e.Event] = e.Value
		}
	}
	if v := got["/replaytest"]["task-clock"]; math.Abs(v-(303.95+303.49+93.63)*1e6) > 1 {
		t.Errorf("replaytest task-clock %v ns", v)
	}
	if v := got["/replaytest"]["context-switches"]; v != 4 {
		t.Errorf("replaytest context-switches %v, want 2+1+1", v)
	}
	if v := got["/"]["task-clock"]; math.Abs(v-(304.47+304.07+304.46+303.98+97.01+94.03)*1e6) > 1 {
		t.Errorf("root task-clock %v ns", v)
	}
	if len(p.Snapshot().Events) != 0 || p.Topdown() != nil {
		t.Errorf("a recording of cgroups only has no node-level counts")
	}
}

func TestRecordedSystemWide(t *testing.T) {
	p := NewPlayer(load(t, "../formats/perfstat/testdata/interval.csv"), nil, nil)
	for range 3 {
		p.Step()
	}
	for _, e := range p.Snapshot().Events {
		if e.Event == "cpu-clock" {
			if got, want := e.PerCPU[noCPU], uint64(math.Round((401.13+401.39+100.77)*1e6)); got != want {
				t.Errorf("cpu-clock %d ns, want %d", got, want)
			}
		}
	}
	if p.Cgroups() != nil {
		t.Error("no cgroup column, no cgroup view")
	}
}

func TestRunPacesAndStops(t *testing.T) {
	rec, err := Load("pace", strings.NewReader("0.01,1,,x,1,100,,\n0.02,1,,x,1,100,,\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := NewPlayer(rec, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	steps := 0
	go func() { p.Run(ctx, func(float64) { steps++ }); close(done) }()
	for p.Cycles() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if steps != int(p.Cycles()) {
		t.Errorf("%d steps observed, %d cycles", steps, p.Cycles())
	}
	if got := p.Snapshot().Events[0].PerCPU[noCPU]; got < 5 {
		t.Errorf("x = %d after %d cycles", got, p.Cycles())
	}
}

func TestLoadErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":               "no perf stat values",
		"1,,x,1,100,,\n": "line 1: no interval time",
		"1.0,CPU0,1,,x,1,100,,\n1.0,1,,x,1,100,,\n": "line 2: some lines name a CPU",
		"2.0,1,,x,1,100,,\n1.0,1,,x,1,100,,\n":      "line 2: interval time 1 does not follow 2",
		"# pod abc\n1.0,1,,x,1,100,,\n":             "line 1: want \"# pod UID",
		"# pod u ns p c\n":                          "line 1: container \"c\" is not CONTAINER-ID=NAME",
		"1.0,CPUx,1,,x,1,100,,\n":                   "line 1: CPU \"CPUx\"",
		"1.0,1,,x,1,100,,\n2.0,1,,x,1,101,,\n":      "in.csv: line 2: percent running",
	} {
		_, err := Load("in.csv", strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func FuzzLoad(f *testing.F) {
	for _, name := range []string{"testdata/skx-handmade.csv", "../formats/perfstat/testdata/cgroup.csv", "../formats/perfstat/testdata/cgroup.json"} {
		b, _ := os.ReadFile(name)
		f.Add(string(b))
	}
	def, _ := topdown.Builtin("skx")
	tree, _ := def.Compile()
	f.Fuzz(func(t *testing.T, in string) {
		rec, err := Load("fuzz", strings.NewReader(in))
		if err != nil {
			return
		}
		p := NewPlayer(rec, tree, map[string]float64{"smt_on": 1})
		for range len(rec.Intervals) + 1 {
			p.Step()
		}
		p.Snapshot()
		if v := p.Cgroups(); v != nil {
			v.Snapshot()
		}
		p.Topdown().Totals()
	})
}

// cgroup.json is perf 6.1's -j -G output: JSON lines replay as CSV does.
func TestRecordedJSON(t *testing.T) {
	rec := load(t, "../formats/perfstat/testdata/cgroup.json")
	if rec.PerCPU || !rec.Cgroups || len(rec.Intervals) != 2 {
		t.Fatalf("%+v", rec)
	}
	p := NewPlayer(rec, nil, nil)
	p.Step()
	p.Step()
	c := p.Cgroups().Snapshot().Cgroups
	if len(c) != 1 || c[0].Path != "/replaytest" || len(c[0].Events) != 2 {
		t.Fatalf("%+v", c)
	}
	if v := c[0].Events[0].Value; c[0].Events[0].Event != "task-clock" || math.Abs(v-(303.861701+98.088459)*1e6) > 1 {
		t.Errorf("task-clock %v ns", v)
	}
	if e := c[0].Events[1]; e.Event != "software/config=3/" || e.Value != 3 {
		t.Errorf("context switches (software/config=3/) %+v, want 1+2", e)
	}
}
