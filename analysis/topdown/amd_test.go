package topdown

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric/expr"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// perfToOurs maps perf's AMD pipeline metric names (Zen 4 and Zen 5 spellings) to
// our node names, as the issue fixes them.
var perfToOurs = map[string]string{
	"frontend_bound": "frontend_bound", "bad_speculation": "bad_speculation", "backend_bound": "backend_bound",
	"smt_contention": "smt_contention", "retiring": "retiring",
	"frontend_bound_latency": "fetch_latency", "frontend_bound_by_latency": "fetch_latency",
	"frontend_bound_bandwidth": "fetch_bandwidth", "frontend_bound_by_bandwidth": "fetch_bandwidth",
	"bad_speculation_mispredicts": "branch_mispredicts", "bad_speculation_from_mispredicts": "branch_mispredicts",
	"bad_speculation_pipeline_restarts": "machine_clears", "bad_speculation_from_pipeline_restarts": "machine_clears",
	"backend_bound_memory": "memory_bound", "backend_bound_by_memory": "memory_bound",
	"backend_bound_cpu": "core_bound", "backend_bound_by_cpu": "core_bound",
	"retiring_fastpath": "light_operations", "retiring_from_fastpath": "light_operations",
	"retiring_microcode": "heavy_operations", "retiring_from_microcode": "heavy_operations",
}

// perfMetrics evaluates perf JSON metric expressions, resolving references to
// other metrics recursively and events from a value map.
type perfMetrics struct {
	exprs  map[string]string
	events map[string]float64
}

func (p perfMetrics) eval(t *testing.T, name string, depth int) float64 {
	t.Helper()
	if depth > 10 {
		t.Fatalf("perf metric %s recurses too deep", name)
	}
	var names []string
	var values []float64
	prog, err := expr.Compile(p.exprs[name], func(n string) (int, bool) {
		names = append(names, n)
		values = append(values, 0)
		return len(values) - 1, true
	})
	if err != nil {
		t.Fatalf("perf %s: %v", name, err)
	}
	for i, n := range names {
		if _, isMetric := p.exprs[n]; isMetric {
			values[i] = p.eval(t, n, depth+1)
			continue
		}
		v, ok := p.events[n]
		if !ok {
			t.Fatalf("perf %s uses %s, which our tree does not count", name, n)
		}
		values[i] = v
	}
	return prog.Eval(values, make([]float64, prog.StackSize()))
}

func TestMatchesPerfAMDPipelineMetrics(t *testing.T) {
	dir := reference.Dir(t)
	for _, c := range []struct{ uarch, dir string }{{"zen4", "amdzen4"}, {"zen5", "amdzen5"}} {
		pm := perfMetrics{exprs: map[string]string{}}
		for _, f := range []string{"pipeline.json", "recommended.json"} {
			b, err := os.ReadFile(filepath.Join(dir, "linux-pmu-events/x86", c.dir, f))
			if err != nil {
				t.Fatal(err)
			}
			var ms []struct{ MetricName, MetricExpr, MetricGroup string }
			if err := json.Unmarshal(b, &ms); err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				pm.exprs[m.MetricName] = m.MetricExpr
			}
		}
		tr := tree(t, c.uarch)
		ev := tr.NewEvaluator()
		rng := rand.New(rand.NewPCG(7, 9))
		checked := 0
		for trial := 0; trial < 200; trial++ {
			pm.events = fillRandom(tr, ev, rng, nil, trial%10 == 0) // every tenth interval idle: zero denominators
			ev.Eval()
			for perfName, ours := range perfToOurs {
				if _, ok := pm.exprs[perfName]; !ok {
					continue
				}
				want := pm.eval(t, perfName, 0)
				if got := ev.Value(ours); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s %s/%s: ours %v, perf's %v", c.uarch, perfName, ours, got, want)
				}
				checked++
			}
		}
		if checked != 200*13 {
			t.Errorf("%s: %d comparisons, want 13 nodes x 200", c.uarch, checked)
		}
	}
}

// TestZen4EncodingsMatchPerfEvents checks our specs (the Info events' too)
// against the Zen 4 event files
// in the shared reference (the PPR's PERF_CTL layout: EventSelect[11:8] at 35:32).
func TestZen4EncodingsMatchPerfEvents(t *testing.T) {
	dir := reference.Dir(t)
	byName := map[string]reference.Event{}
	for _, f := range []string{"core.json", "cache.json", "branch.json", "memory.json"} {
		for _, e := range reference.Events(t, filepath.Join(dir, "linux-pmu-events/x86/amdzen4", f)) {
			byName[e.EventName] = e
		}
	}
	pmus := fixture.PMUs(t, fixture.AMDZen3())
	for _, uarch := range []string{"zen4", "zen5"} {
		d, _ := Builtin(uarch)
		compared := 0
		for _, ev := range append(slices.Clone(d.Events), d.Info...) {
			res, err := eventspec.Resolve(ev.Spec, pmus)
			if err != nil {
				t.Errorf("%s %s: %v", uarch, ev.Name, err)
				continue
			}
			r, ok := byName[strings.TrimPrefix(ev.Name, "cpu/")]
			if !ok {
				continue // documented in Linux perf files outside the shared copy (other.json, pipeline.json)
			}
			code, um := num(t, r.EventCode), num(t, r.UMask)
			if want := code&0xff | um<<8 | (code>>8)<<32; res[0].Attr.Config != want {
				t.Errorf("%s %s: config %#x, perf's JSON gives %#x", uarch, ev.Name, res[0].Attr.Config, want)
			}
			compared++
		}
		if compared < 6 {
			t.Errorf("%s: only %d encodings compared", uarch, compared)
		}
	}
}
