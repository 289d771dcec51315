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

// armPublished reads the level-1 expressions for a tree: the core's own file
// where it defines a node, else the SBSA one (ArchStdEvent inheritance).
func armPublished(t *testing.T, dir, core string) map[string]string {
	t.Helper()
	read := func(p string) []struct{ MetricName, MetricExpr, ArchStdEvent string } {
		b, err := os.ReadFile(filepath.Join(dir, "linux-pmu-events/arm64", p))
		if err != nil {
			t.Fatal(err)
		}
		var ms []struct{ MetricName, MetricExpr, ArchStdEvent string }
		if err := json.Unmarshal(b, &ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	out := map[string]string{}
	for _, m := range read("sbsa.json") {
		out[strings.ToLower(m.MetricName)] = m.MetricExpr
	}
	if core != "" {
		for _, m := range read(core) {
			name := strings.ToLower(m.MetricName + m.ArchStdEvent)
			if _, l1 := out[name]; l1 && m.MetricExpr != "" {
				out[name] = m.MetricExpr
			}
		}
	}
	return out
}

func TestMatchesArmPublishedTopdown(t *testing.T) {
	dir := reference.Dir(t)
	for _, c := range []struct{ uarch, core string }{
		{"neoverse", ""}, {"neoverse-n2", "arm/neoverse-n2-v2/metrics.json"}, {"neoverse-v2", "arm/neoverse-n2-v2/metrics.json"},
		{"neoverse-v1", "arm/neoverse-v1/metrics.json"},
	} {
		pub := armPublished(t, dir, c.core)
		tr := tree(t, c.uarch)
		ev := tr.NewEvaluator()
		rng := rand.New(rand.NewPCG(3, 5))
		for trial := 0; trial < 200; trial++ {
			slots := []float64{4, 5, 8}[trial%3]
			in := fillRandom(tr, ev, rng, map[string]float64{"#slots": slots}, false)
			in["#slots"] = slots
			ev.Eval()
			for _, node := range []string{"frontend_bound", "backend_bound", "bad_speculation", "retiring"} {
				formula := pub[node]
				var values []float64
				prog, err := expr.Compile(formula, func(n string) (int, bool) {
					v, ok := in[strings.ToLower(n)]
					values = append(values, v)
					return len(values) - 1, ok
				})
				if err != nil {
					t.Fatalf("%s %s: %v", c.uarch, node, err)
				}
				want := prog.Eval(values, make([]float64, prog.StackSize()))
				if strings.Contains(formula, "100 *") {
					want /= 100 // V1's file writes percent; SBSA's are fractions with ScaleUnit 100%
				}
				if got := ev.Value(node); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s %s (#slots %v): ours %v, published %v", c.uarch, node, slots, got, want)
				}
			}
		}
	}
}

// The 5-slot adjustment, by hand: 1000 cycles × 5 slots; 1000 of the 1800 stall
// slots and of the 1200 frontend stall slots are taken out.
func TestNeoverseN2FiveSlotAdjustment(t *testing.T) {
	in := map[string]float64{"#slots": 5, "cpu_cycles": 1000, "stall_slot": 1800, "stall_slot_frontend": 1200,
		"stall_slot_backend": 600, "op_retired": 900, "op_spec": 1000}
	expect(t, eval(t, "neoverse-n2", in), map[string]float64{
		"frontend_bound": 200.0 / 5000, "backend_bound": 600.0 / 5000,
		"retiring": 0.9 * (1 - 800.0/5000), "bad_speculation": 0.1 * (1 - 800.0/5000),
	})
	in["#slots"] = 8 // no adjustment
	expect(t, eval(t, "neoverse-n2", in), map[string]float64{"frontend_bound": 1200.0 / 8000})
}

func TestArmEncodingsAreArchitectedEvents(t *testing.T) {
	dir := reference.Dir(t)
	codes := map[string]uint64{}
	for _, e := range reference.Events(t, filepath.Join(dir, "linux-pmu-events/arm64/common-and-microarch.json")) {
		codes[strings.ToLower(e.EventName)] = num(t, e.EventCode)
	}
	pmus := fixture.PMUs(t, fixture.ArmNeoverseN1())
	for _, uarch := range []string{"neoverse", "neoverse-n2", "neoverse-v1"} {
		d, _ := Builtin(uarch)
		for _, ev := range append(slices.Clone(d.Events), d.Info...) { // the Info events too
			want, ok := codes[ev.Name]
			if !ok {
				t.Errorf("%s: %s is not an architected PMUv3 event", uarch, ev.Name)
				continue
			}
			spec := ev.Spec // an Info event's cpu/ spec goes on the core PMU, as the collector places it
			if rest, ok := strings.CutPrefix(spec, "cpu/"); ok {
				spec = "armv8_pmuv3_0/" + rest
			}
			res, err := eventspec.Resolve(spec, pmus)
			if err != nil || res[0].Attr.Config != want || res[0].PMU != "armv8_pmuv3_0" {
				t.Errorf("%s %s: %+v %v, want event %#x on the core PMU", uarch, ev.Name, res, err, want)
			}
		}
	}
}

// Each Neoverse tree's Info events are the inputs of Arm's L2 MPKI
// (metrics.json's l2_cache_mpki or l2d_cache_mpki) beside INST_RETIRED.
func TestArmInfoIsL2MPKI(t *testing.T) {
	dir := reference.Dir(t)
	for uarch, file := range map[string]string{"neoverse": "neoverse-n1", "neoverse-n2": "neoverse-n2-v2", "neoverse-v1": "neoverse-v1"} {
		var expr string
		for _, m := range reference.Metrics(t, filepath.Join(dir, "linux-pmu-events/arm64/arm", file, "metrics.json")) {
			if m.MetricName == "l2_cache_mpki" || m.MetricName == "l2d_cache_mpki" {
				expr = m.MetricExpr
			}
		}
		d, _ := Builtin(uarch)
		if len(d.Info) != 1 || !strings.Contains(expr, strings.ToUpper(d.Info[0].Name)+" / INST_RETIRED") {
			t.Errorf("%s: info %+v, %s's L2 MPKI is %q", uarch, d.Info, file, expr)
		}
	}
}
