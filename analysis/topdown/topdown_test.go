package topdown

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric/expr"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// Our node names for Intel's TMA metric names.
var intelNodes = map[string]string{
	"Frontend_Bound": "frontend_bound", "Fetch_Latency": "fetch_latency", "Fetch_Bandwidth": "fetch_bandwidth",
	"Bad_Speculation": "bad_speculation", "Branch_Mispredicts": "branch_mispredicts", "Machine_Clears": "machine_clears",
	"Backend_Bound": "backend_bound", "Memory_Bound": "memory_bound", "Core_Bound": "core_bound",
	"Retiring": "retiring", "Light_Operations": "light_operations", "Heavy_Operations": "heavy_operations",
	// Intel's E-core tree (Sierra Forest)
	"IFetch_Latency": "fetch_latency", "IFetch_Bandwidth": "fetch_bandwidth", "Resource_Bound": "resource_bound",
}

// eCoreNodes are the nodes of Intel's E-core tree, which has no memory_bound,
// light_operations or heavy_operations.
var eCoreNodes = map[string]bool{"frontend_bound": true, "fetch_latency": true, "fetch_bandwidth": true,
	"bad_speculation": true, "branch_mispredicts": true, "machine_clears": true, "backend_bound": true,
	"core_bound": true, "resource_bound": true, "retiring": true}

// eCoreTree marks the trees written from Intel's E-core TMA.
var eCoreTree = map[string]bool{"srf": true, "grt": true}

func tree(t *testing.T, uarch string) *metric.Tree {
	t.Helper()
	d, err := Builtin(uarch)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := d.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestEveryBuiltinCompilesWithTheSameNodes(t *testing.T) {
	for _, n := range Names() {
		tr := tree(t, n)
		have := map[string]int{}
		for _, m := range tr.Metrics() {
			if m.Level > 0 {
				have[m.Name] = m.Level
			}
		}
		for _, node := range intelNodes {
			level1 := node == "frontend_bound" || node == "bad_speculation" || node == "backend_bound" || node == "retiring"
			if strings.HasPrefix(n, "neoverse") && !level1 {
				continue // Arm publishes level 1 only
			}
			if eCoreTree[n] && !eCoreNodes[node] || !eCoreTree[n] && node == "resource_bound" {
				continue // the E-core tree has its own level 2
			}
			if have[node] == 0 {
				t.Errorf("%s lacks %s", n, node)
			}
		}
		if strings.HasPrefix(n, "zen") && have["smt_contention"] != 1 {
			t.Errorf("%s lacks smt_contention at level 1", n)
		}
	}
}

type published struct {
	name    string // ours
	level   int
	formula string
	alias   map[string]string // alias -> event or constant name
}

// publishedTree is a perfmon metrics file's Top-Down nodes that tree
// defines: levels 1 and 2 always (all twelve, or the E-core tree's ten),
// and deeper ones where the tree goes deeper, every one Intel publishes
// at each level the tree has, and those below that it defines.
func publishedTree(t *testing.T, path string, tree *metric.Tree) []published {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Metrics []struct {
			MetricName, Formula, Category string
			Level                         int
			Events, Constants             []struct{ Name, Alias string }
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	ours := map[string]int{}
	deepest := 0
	for _, m := range tree.Metrics() {
		ours[m.Name] = m.Level
		deepest = max(deepest, m.Level)
	}
	var out []published
	shallow, uncounted := 0, 0
	for _, m := range doc.Metrics {
		if m.Category != "TMA" {
			continue
		}
		name, top := intelNodes[m.MetricName]
		if !top {
			name = strings.ToLower(m.MetricName)
			if m.Level < 3 || m.Level > deepest {
				continue
			}
			if _, have := ours[name]; !have {
				if slices.Contains(tree.Def.Uncounted, name) {
					uncounted++
					continue
				}
				if m.Level <= 3 || deepest > 4 { // below level 4, the generated levels are whole
					t.Errorf("%s: %s (level %d) is not in our %s tree, which goes to level %d", path, m.MetricName, m.Level, tree.Def.Name, deepest)
				}
				continue
			}
		} else {
			shallow++
		}
		p := published{name: name, level: m.Level, formula: m.Formula, alias: map[string]string{}}
		for _, e := range append(m.Events, m.Constants...) {
			// Formulas' names cannot hold =: OCR.X:ocr_msr_val=0x1 is
			// OCR.X:ocr_msr_val0x1 in our trees.
			p.alias[e.Alias] = cmp.Or(sameEncoding[e.Name], strings.ReplaceAll(e.Name, "=", ""))
		}
		out = append(out, p)
	}
	if uncounted != len(tree.Def.Uncounted) {
		t.Errorf("%s: %d of the %d nodes %s says it does not count are Intel's", path, uncounted, len(tree.Def.Uncounted), tree.Def.Name)
	}
	if shallow != 12 && !(strings.Contains(path, "sierraforest") && shallow == 10) {
		t.Fatalf("%s: found %d level 1-2 nodes", path, shallow)
	}
	return out
}

// sameEncoding are Intel's names in metric formulas for events our trees
// count under another name of the same encoding (TestSameEncodings).
var sameEncoding = map[string]string{
	"FP_ARITH_INST_RETIRED.128B_PACKED_DOUBLE:u0xfc": "FP_ARITH_INST_RETIRED.VECTOR",
}

// The names in sameEncoding are one encoding: the modifier :uN replaces
// the umask, per Skylake-SP's event list.
func TestSameEncodings(t *testing.T) {
	byName := map[string]reference.Event{}
	for _, e := range reference.Events(t, filepath.Join(reference.Dir(t), "intel-perfmon", "SKX/events/skylakex_core.json")) {
		byName[e.EventName] = e
	}
	for theirs, ours := range sameEncoding {
		base, umask, _ := strings.Cut(theirs, ":u")
		a, b := byName[base], byName[ours]
		if a.EventCode == "" || b.EventCode == "" || num(t, a.EventCode) != num(t, b.EventCode) || num(t, umask) != num(t, b.UMask) {
			t.Errorf("%s (%+v) is not %s (%+v)", theirs, a, ours, b)
		}
	}
}

// TestMatchesIntelPublishedFormulas evaluates Intel's own formulas, straight from
// the perfmon JSON, and our trees on the same random counter vectors, with SMT
// off and on, for every platform each tree serves.
func TestMatchesIntelPublishedFormulas(t *testing.T) {
	dir := reference.Dir(t)
	platforms := map[string]string{ // perfmon platform -> our tree
		"SKL/metrics/skylake_metrics.json": "skl", "SKX/metrics/skylakex_metrics.json": "skx",
		"CLX/metrics/cascadelakex_metrics.json": "clx", "SPR/metrics/sapphirerapids_metrics.json": "spr",
		"SPR/metrics/sapphirerapidshbm_metrics.json": "spr", "EMR/metrics/emeraldrapids_metrics.json": "emr",
		"GNR/metrics/graniterapids_metrics.json": "gnr", "ICL/metrics/icelake_metrics.json": "icl",
		"ICX/metrics/icelakex_metrics.json": "icx", "ADL/metrics/alderlake_metrics_goldencove_core.json": "adl",
		"SRF/metrics/sierraforest_metrics.json": "srf",
	}
	// Xeon Max (Sapphire Rapids with HBM) is the same CPU model as
	// Sapphire Rapids: it runs the spr tree, whose level 3 is Sapphire
	// Rapids' (l3_miss_bound: DRAM and HBM together, where Xeon Max's own
	// tree splits them); it is held to its file to level 2.
	levels := map[string]int{"SPR/metrics/sapphirerapidshbm_metrics.json": 2}
	for file, uarch := range platforms {
		plat := strings.SplitN(file, "/", 2)[0]
		tr := tree(t, uarch)
		if l, ok := levels[file]; ok {
			d, err := tr.Def.Prune(l, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tr, err = d.Compile(); err != nil {
				t.Fatal(err)
			}
		}
		pub := publishedTree(t, filepath.Join(dir, "intel-perfmon", file), tr)
		ev := tr.NewEvaluator()
		rng := rand.New(rand.NewPCG(1, uint64(len(plat))))
		for trial := 0; trial < 300; trial++ {
			smt := float64(trial % 2)
			inputs := fillRandom(tr, ev, rng, map[string]float64{"smt_on": smt}, false)
			inputs["HYPERTHREADING_ON"] = smt
			ev.Eval()
			for _, p := range pub {
				prog, err := expr.Compile(p.formula, func(alias string) (int, bool) { return 0, true })
				if err != nil {
					t.Fatal(err)
				}
				values := make([]float64, 0, len(prog.Names))
				slots := map[string]int{}
				prog, err = expr.Compile(p.formula, func(alias string) (int, bool) {
					name, ok := p.alias[alias]
					if !ok {
						return 0, false
					}
					v, ok := inputs[name]
					if n, err := strconv.ParseFloat(name, 64); err == nil {
						v, ok = n, true // a numeric constant: L1_Latency_Dependency's weight
					} else if name == "THREADS_PER_CORE" {
						v, ok = 1+smt, true
					}
					if !ok {
						return 0, false
					}
					if s, ok := slots[name]; ok {
						return s, true
					}
					slots[name] = len(values)
					values = append(values, v)
					return slots[name], true
				})
				if err != nil {
					t.Fatalf("%s %s: an input we do not count: %v", plat, p.name, err)
				}
				want := prog.Eval(values, make([]float64, prog.StackSize())) / 100
				got := ev.Value(p.name)
				if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s %s (smt %v): ours %v, Intel's %v", plat, p.name, smt, got, want)
				}
			}
		}
	}
}

// fillRandom gives every input of tr a random count in [1, 1e6] (or zero when
// idle), after setting params, and returns the values by input name.
func fillRandom(tr *metric.Tree, ev *metric.Evaluator, rng *rand.Rand, params map[string]float64, idle bool) map[string]float64 {
	in := map[string]float64{}
	ev.Reset()
	for name, v := range params {
		if i := tr.Input(name); i >= 0 {
			ev.Set(i, v)
		}
	}
	for _, name := range tr.Inputs {
		if _, isParam := params[name]; isParam {
			continue
		}
		v := float64(rng.IntN(1_000_000) + 1)
		if idle {
			v = 0
		}
		in[name] = v
		ev.Set(tr.Input(name), v)
	}
	return in
}

func eval(t *testing.T, uarch string, in map[string]float64) *metric.Evaluator {
	t.Helper()
	tr := tree(t, uarch)
	e := tr.NewEvaluator()
	for k, v := range in {
		i := tr.Input(k)
		if i < 0 {
			t.Fatalf("%s has no input %s", uarch, k)
		}
		e.Set(i, v)
	}
	e.Eval()
	return e
}

func expect(t *testing.T, e *metric.Evaluator, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if got := e.Value(k); math.Abs(got-v) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
}

// Hand-computed: slots 1000 split 200/100/400/300 by PERF_METRICS, 10 dropped uops.
func TestSPRHandComputed(t *testing.T) {
	e := eval(t, "spr", map[string]float64{
		"TOPDOWN.SLOTS:perf_metrics": 1000, "PERF_METRICS.FRONTEND_BOUND": 200, "PERF_METRICS.BAD_SPECULATION": 100,
		"PERF_METRICS.RETIRING": 400, "PERF_METRICS.BACKEND_BOUND": 300, "PERF_METRICS.HEAVY_OPERATIONS": 100,
		"PERF_METRICS.BRANCH_MISPREDICTS": 80, "PERF_METRICS.FETCH_LATENCY": 150, "PERF_METRICS.MEMORY_BOUND": 200,
		"INT_MISC.UOP_DROPPING": 10,
	})
	expect(t, e, map[string]float64{
		"frontend_bound": 0.19, "fetch_latency": 0.14, "fetch_bandwidth": 0.05,
		"bad_speculation": 0.11, "branch_mispredicts": 0.08, "machine_clears": 0.03,
		"backend_bound": 0.3, "memory_bound": 0.2, "core_bound": 0.1,
		"retiring": 0.4, "heavy_operations": 0.1, "light_operations": 0.3,
	})
	if !e.Above("frontend_bound") || e.Above("bad_speculation") || len(e.Violations) != 0 {
		t.Errorf("thresholds/containment: fe %v bad %v violations %v", e.Above("frontend_bound"), e.Above("bad_speculation"), e.Violations)
	}
}

// Hand-computed Skylake-SP, SMT off: 1000 cycles = 4000 slots.
func TestSKXHandComputed(t *testing.T) {
	in := map[string]float64{
		"smt_on": 0, "CPU_CLK_UNHALTED.THREAD": 1000, "CPU_CLK_UNHALTED.THREAD_ANY": 1600,
		"IDQ_UOPS_NOT_DELIVERED.CORE": 800, "IDQ_UOPS_NOT_DELIVERED.CYCLES_0_UOPS_DELIV.CORE": 150,
		"UOPS_ISSUED.ANY": 2600, "UOPS_RETIRED.RETIRE_SLOTS": 2000, "INT_MISC.RECOVERY_CYCLES": 50,
		"INT_MISC.RECOVERY_CYCLES_ANY": 60, "BR_MISP_RETIRED.ALL_BRANCHES": 30, "MACHINE_CLEARS.COUNT": 10,
		"CYCLE_ACTIVITY.STALLS_MEM_ANY": 100, "EXE_ACTIVITY.BOUND_ON_STORES": 20, "CYCLE_ACTIVITY.STALLS_TOTAL": 200,
		"EXE_ACTIVITY.1_PORTS_UTIL": 100, "EXE_ACTIVITY.2_PORTS_UTIL": 160, "UOPS_RETIRED.MACRO_FUSED": 100,
		"INST_RETIRED.ANY": 1900,
	}
	expect(t, eval(t, "skx", in), map[string]float64{
		"frontend_bound": 0.2, "fetch_latency": 0.15, "fetch_bandwidth": 0.05,
		"bad_speculation": 0.2, "branch_mispredicts": 0.15, "machine_clears": 0.05,
		"backend_bound": 0.1, "memory_bound": 0.03, "core_bound": 0.07,
		"retiring": 0.5, "heavy_operations": 0.05, "light_operations": 0.45,
	})
	// SMT on: slots = 4 × THREAD_ANY/2 = 3200, recovery = 4 × 60/2 = 120.
	in["smt_on"] = 1
	expect(t, eval(t, "skx", in), map[string]float64{
		"frontend_bound": 0.25, "retiring": 0.625, "bad_speculation": (2600 - 2000 + 120) / 3200.0,
		"backend_bound": 1 - 0.25 - (2600+120)/3200.0,
	})
}

// An interval without cycles has no fractions: frontend_bound divides by
// zero slots, which is "not computed" (NaN), as perf refuses it, never 0 or
// infinity.
func TestZeroCyclesIsNotComputed(t *testing.T) {
	e := eval(t, "skx", map[string]float64{"smt_on": 0, "CPU_CLK_UNHALTED.THREAD": 0, "IDQ_UOPS_NOT_DELIVERED.CORE": 0})
	if v := e.Value("frontend_bound"); !math.IsNaN(v) {
		t.Errorf("idle frontend_bound = %v, want not computed (NaN)", v)
	}
	if v := e.Value("retiring"); !math.IsNaN(v) {
		t.Errorf("retiring without its event = %v, want absent (NaN)", v)
	}
}

// TestEventSpecsMatchIntelEncodings resolves every event spec of our trees on a
// fixture PMU of that generation and compares the encoding with the platform's
// event JSON (architectural encodings for the fixed-counter events).
func TestEventSpecsMatchIntelEncodings(t *testing.T) {
	dir := reference.Dir(t)
	cases := []struct {
		uarch, events string
		host          fixture.Host
		corePMU       string // where a hybrid host counts the tree
		cpus          []int
	}{
		{"skx", "SKX/events/skylakex_core.json", fixture.IntelSkylake(), "", nil},
		{"spr", "SPR/events/sapphirerapids_core.json", fixture.IntelSapphireRapids(), "", nil},
		{"gnr", "GNR/events/graniterapids_core.json", fixture.IntelSapphireRapids(), "", nil},
		{"icx", "ICX/events/icelakex_core.json", fixture.IntelIcelake(), "", nil},
		{"srf", "SRF/events/sierraforest_core.json", fixture.IntelIcelake(), "", nil},
		{"adl", "ADL/events/alderlake_goldencove_core.json", fixture.IntelAlderLake(), "cpu_core", []int{0, 1, 2, 3}},
		{"grt", "ADL/events/alderlake_gracemont_core.json", fixture.IntelAlderLake(), "cpu_atom", []int{4, 5, 6, 7}},
	}
	fixed := map[string]uint64{ // fixed counters' architectural equivalents (SDM 20.2.1.2)
		"CPU_CLK_UNHALTED.THREAD": 0x3c, "CPU_CLK_UNHALTED.THREAD_ANY": 0x3c | 1<<21, "INST_RETIRED.ANY": 0xc0,
		"CPU_CLK_UNHALTED.CORE": 0x3c,
	}
	for _, c := range cases {
		byName := map[string]reference.Event{}
		for _, e := range reference.Events(t, filepath.Join(dir, "intel-perfmon", c.events)) {
			byName[e.EventName] = e
		}
		pmus := fixture.PMUs(t, c.host)
		d, _ := Builtin(c.uarch)
		for _, ev := range append(slices.Clone(d.Events), d.Info...) { // the Info events too
			res, err := resolveOn(ev.Spec, pmus, c.corePMU)
			if err != nil {
				t.Errorf("%s %s: %v", c.uarch, ev.Name, err)
				continue
			}
			if wantPMU := cmp.Or(c.corePMU, "cpu"); res.PMU != wantPMU || !slices.Equal(res.CPUs, c.cpus) {
				t.Errorf("%s %s: on %s CPUs %v, want %s CPUs %v", c.uarch, ev.Name, res.PMU, res.CPUs, wantPMU, c.cpus)
			}
			got := res.Attr.Config
			if want, ok := fixed[ev.Name]; ok {
				if got != want {
					t.Errorf("%s %s: config %#x, want %#x", c.uarch, ev.Name, got, want)
				}
				continue
			}
			parts := strings.Split(ev.Name, ":")
			name := parts[0]
			if strings.HasPrefix(name, "PERF_METRICS.") {
				continue // pseudo-events of the PERF_METRICS MSR, checked below
			}
			r, ok := byName[name]
			if !ok {
				t.Errorf("%s: %s is not an event of this platform", c.uarch, name)
				continue
			}
			r.EventCode, _, _ = strings.Cut(r.EventCode, ",") // offcore responses: 0xB7, 0xBB
			config1 := ""
			switch strings.ReplaceAll(strings.ToLower(r.MSRIndex), " ", "") {
			case "0x1a6,0x1a7", "0x3f6", "0x3f7": // offcore response, load latency, frontend
				config1 = r.MSRValue
			}
			for _, mod := range parts[1:] { // Intel's modifier notation: :c1 cmask, :e1 edge, :i1 invert, :u0x80 umask
				switch {
				case strings.HasPrefix(mod, "ocr_msr_val"):
					config1 = strings.TrimPrefix(mod, "ocr_msr_val")
				case strings.HasPrefix(mod, "c"):
					r.CounterMask = mod[1:]
				case strings.HasPrefix(mod, "e"):
					r.EdgeDetect = mod[1:]
				case strings.HasPrefix(mod, "i"):
					r.Invert = mod[1:]
				case strings.HasPrefix(mod, "u"):
					r.UMask = mod[1:]
				}
			}
			want := num(t, r.EventCode) | num(t, r.UMask)<<8 | num(t, r.EdgeDetect)<<18 | num(t, r.AnyThread)<<21 |
				num(t, r.Invert)<<23 | num(t, r.CounterMask)<<24
			if got != want {
				t.Errorf("%s %s: config %#x, Intel documents %#x", c.uarch, ev.Name, got, want)
			}
			if res.Attr.Config1 != num(t, config1) {
				t.Errorf("%s %s: config1 %#x, Intel documents %s", c.uarch, ev.Name, res.Attr.Config1, cmp.Or(config1, "none"))
			}
		}
	}
	// The PERF_METRICS events are the kernel's pseudo-encodings event=0, umask 0x80+field.
	d, _ := Builtin("spr")
	pmus := fixture.PMUs(t, fixture.IntelSapphireRapids())
	for field, umask := range map[string]uint64{"RETIRING": 0x80, "BAD_SPECULATION": 0x81, "FRONTEND_BOUND": 0x82,
		"BACKEND_BOUND": 0x83, "HEAVY_OPERATIONS": 0x84, "BRANCH_MISPREDICTS": 0x85, "FETCH_LATENCY": 0x86, "MEMORY_BOUND": 0x87} {
		for _, ev := range d.Events {
			if ev.Name == "PERF_METRICS."+field {
				res, err := eventspec.Resolve(ev.Spec, pmus)
				if err != nil || res[0].Attr.Config != umask<<8 {
					t.Errorf("%s: %+v %v, want umask %#x", ev.Name, res, err, umask)
				}
			}
		}
	}
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	if s == "" {
		return 0
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatal(fmt.Errorf("reference value %q: %w", s, err))
	}
	return v
}

// Every tree names its denominator "slots": live export multiplies fractions by it.
func TestEveryTreeHasSlots(t *testing.T) {
	for _, n := range Names() {
		found := false
		for _, m := range tree(t, n).Metrics() {
			found = found || (m.Name == "slots" && m.Level == 0)
		}
		if !found {
			t.Errorf("%s has no level-0 slots metric", n)
		}
	}
}

// TestGracemontMatchesIntelECoreTMA evaluates the GRT column of Intel's E-core
// TMA spreadsheet, its Aux rows (#SLOTS, #Pipeline_Width, #CLKS) and node
// references expanded in the text, against the grt tree on random counts.
func TestGracemontMatchesIntelECoreTMA(t *testing.T) {
	f, err := os.Open(filepath.Join(reference.Dir(t), "intel-perfmon", "E-core_TMA_Metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for _, r := range rows {
		if r[0] == "Key" {
			col = slices.Index(r, "GRT")
		}
	}
	if col < 0 {
		t.Fatal("no GRT column")
	}
	formula := map[string]string{} // TMA node or Aux name -> GRT formula
	var nodes []string
	for _, r := range rows {
		name := r[1] + r[2] + r[3] // one of the three levels' columns
		switch {
		case r[0] == "Aux" && r[col] != "":
			formula[r[1]] = r[col]
		case (r[0] == "FE" || r[0] == "BAD" || r[0] == "BE" || r[0] == "RET") && name != "" && r[col] != "":
			formula[name] = r[col]
			nodes = append(nodes, name)
		}
	}
	if len(nodes) != 26 {
		t.Fatalf("GRT: found %d level 1-3 nodes, want 10 and 16: %v", len(nodes), nodes)
	}
	// Expand names until only events remain; the longest first, so #CLKS_P is
	// not read as #CLKS followed by _P.
	names := slices.Collect(maps.Keys(formula))
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	expand := func(s string) string {
		for range 5 {
			for _, n := range names {
				s = regexp.MustCompile(`(^|[^\w.#])`+regexp.QuoteMeta(n)+`($|[^\w.])`).ReplaceAllString(s, "${1}("+formula[n]+")${2}")
			}
		}
		return s
	}
	tr := tree(t, "grt")
	ev := tr.NewEvaluator()
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 300; trial++ {
		inputs := fillRandom(tr, ev, rng, nil, trial%10 == 0)
		ev.Eval()
		for _, node := range nodes {
			text := expand(formula[node])
			var values []float64
			prog, err := expr.Compile(text, func(name string) (int, bool) {
				v, ok := inputs[name]
				values = append(values, v)
				return len(values) - 1, ok
			})
			if err != nil {
				t.Fatalf("GRT %s = %s: an input we do not count: %v", node, text, err)
			}
			want := prog.Eval(values, make([]float64, prog.StackSize()))
			if math.IsNaN(want) || math.IsInf(want, 0) {
				want = 0 // the idle trial: zero slots, and our division is safe
			}
			ours, top := intelNodes[node]
			if !top {
				ours = strings.ToLower(node) // level 3: Intel's name in lower case
			}
			if got := ev.Value(ours); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
				t.Fatalf("GRT %s (trial %d): ours %v, Intel's %v", node, trial, got, want)
			}
		}
	}
}

// Each built-in tree is as deep as the docs say (docs/flags.md): Intel's
// P-core trees to 6 (the generated levels), its E-core trees to 3, AMD's
// to 2 and Arm's to 1; every tree once, shallowest first.
func TestDepths(t *testing.T) {
	want := []Depth{
		{1, []string{"neoverse", "neoverse-n2", "neoverse-v1", "neoverse-v2"}},
		{2, []string{"zen4", "zen5"}},
		{3, []string{"grt", "srf"}},
		{6, []string{"adl", "clx", "emr", "gnr", "icl", "icx", "skl", "skx", "spr"}},
	}
	got, err := Depths()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("depths %v, want %v", got, want)
	}
}
