package expr

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// env resolves single-letter names a..z to slots 0..25.
func env(name string) (int, bool) {
	if len(name) == 1 && name[0] >= 'a' && name[0] <= 'z' {
		return int(name[0] - 'a'), true
	}
	switch name {
	case "smt_on":
		return 26, true
	case "#slots":
		return 27, true
	case "UOPS_RETIRED.MS:c1:e1":
		return 28, true
	}
	return 0, false
}

func eval(t *testing.T, formula string, vals map[byte]float64) float64 {
	t.Helper()
	p, err := Compile(formula, env)
	if err != nil {
		t.Fatalf("Compile(%q): %v", formula, err)
	}
	values := make([]float64, 32)
	for k, v := range vals {
		values[k-'a'] = v
	}
	return p.Eval(values, make([]float64, p.StackSize()))
}

func TestEval(t *testing.T) {
	v := map[byte]float64{'a': 10, 'b': 4, 'c': 2, 'd': 0}
	cases := []struct {
		f    string
		want float64
	}{
		{"a + b * c", 18},
		{"(a + b) * c", 28},
		{"a - b - c", 4},                  // left associative
		{"a / b / c", 1.25},               // left associative
		{"-a + b", -6},                    // unary binds tighter
		{"- -a", 10},                      // nested unary
		{"a * -b", -40},                   // unary after operator
		{"d_ratio(a, d)", 0},              // perf's d_ratio
		{"d_ratio(a, b)", 2.5},            // ...and when defined
		{"max(a, b, c)", 10},              // variadic
		{"min(a, b, c)", 2},               // variadic
		{"max(0, b - a)", 0},              // as in Fetch_Bandwidth
		{"a if c > b else b", 4},          // false branch
		{"a if b > c else b", 10},         // true branch
		{"a if d else b if c else 99", 4}, // right nested
		{"a > b & c > b", 0},
		{"a > b | c > b", 1},
		{"a > b and c < b", 1},
		{"(a > 20) & (b > 15)", 0},
		{"a >= 10", 1},
		{"a <= 9.5", 0},
		{"a == 10", 1},
		{"a > = 10", 1}, // as Intel's Granite Rapids file writes it
		{"a != 10", 0},
		{"1e3 * c", 2000},
		{"0x10 + a", 26},
		{".5 * a", 5},
		{"100 * ( a / ( a + b + c + d ) - c / ( a ) )", 100 * (10.0/16 - 0.2)}, // Frontend_Bound's shape
		{"( 4 ) * ( ( a / 2 ) if smt_on else ( b ) )", 16},                     // SKX slots, SMT off (smt_on = 0)
	}
	for _, c := range cases {
		if got := eval(t, c.f, v); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", c.f, got, c.want)
		}
	}
}

// a / 0 is not computed (NaN), as perf's parser refuses it; d_ratio is the
// formula author's choice of 0 instead.
func TestDivisionByZero(t *testing.T) {
	v := map[byte]float64{'a': 10, 'd': 0}
	if got := eval(t, "a / d", v); !math.IsNaN(got) {
		t.Errorf("a / d = %v, want NaN (not computed)", got)
	}
	if got := eval(t, "a / d if d else 7", v); got != 7 {
		t.Errorf("a / d in the branch not taken = %v, want 7", got)
	}
	if got := eval(t, "d_ratio(a, d)", v); got != 0 {
		t.Errorf("d_ratio(a, d) = %v, want 0", got)
	}
}

func TestMissingInputsPropagate(t *testing.T) {
	nan := math.NaN()
	v := map[byte]float64{'a': 10, 'b': nan, 'c': 2}
	for _, f := range []string{"a + b", "b / 0", "max(a, b)", "min(b, a)", "b > a", "a if b else c", "-b"} {
		if got := eval(t, f, v); !math.IsNaN(got) {
			t.Errorf("%s = %v with b missing, want NaN", f, got)
		}
	}
	// The branch not taken is not a dependency.
	if got := eval(t, "a if c else b", v); got != 10 {
		t.Errorf("a if c else b = %v, want 10", got)
	}
}

func TestErrorsNamePosition(t *testing.T) {
	cases := []struct{ f, want string }{
		{"a + zz", `unknown name "zz" at column 5`},
		{"a + ", "expected a number, a name or (, found end of formula at column 5"},
		{"(a + b", "expected ), found end of formula at column 7"},
		{"a if b", "expected else, found end of formula at column 7"},
		{"foo(a, b)", `unknown function "foo" (functions: min, max, d_ratio) at column 1`},
		{"max(a)", "max takes at least 2 arguments, got 1 at column 1"},
		{"d_ratio(a, b, c)", "d_ratio takes 2 arguments, got 3"},
		{"a $ b", `unexpected character '$' at column 3`},
		{"a b", "unexpected name b at column 3"},
		{"@cpu", "unterminated @ term"},
		{"cpu@x", "unterminated @ term"},
		{"0xzz", `bad number "0x" at column 1`},
		{strings.Repeat("(", 300) + "a" + strings.Repeat(")", 300), "nests deeper than 200"},
	}
	for _, c := range cases {
		_, err := Compile(c.f, env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%.40q) error = %v, want %q", c.f, err, c.want)
		}
	}
}

func TestNames(t *testing.T) {
	p, err := Compile("UOPS_RETIRED.MS:c1:e1 / #slots", env)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Names) != 2 || p.Names[0] != "UOPS_RETIRED.MS:c1:e1" || p.Names[1] != "#slots" {
		t.Errorf("names = %v", p.Names)
	}
	// A name may start with digits (Intel's 4K_Aliasing); a number stays one.
	if vars, err := Vars("(4k_aliasing > 0.2) & (l1_bound > 10) & 2 * 16 > 4e1"); err != nil || strings.Join(vars, "|") != "4k_aliasing|l1_bound" {
		t.Errorf("Vars = %q, %v; want 4k_aliasing and l1_bound", vars, err)
	}
	vars, err := Vars(`d_ratio((6 * cpu@de_no_dispatch_per_slot.no_ops_from_frontend\,cmask\=0x6@), total_dispatch_slots) + topdown\-fe\-bound`)
	want := []string{"cpu/de_no_dispatch_per_slot.no_ops_from_frontend,cmask=0x6/", "total_dispatch_slots", "topdown-fe-bound"}
	if err != nil || strings.Join(vars, "|") != strings.Join(want, "|") {
		t.Errorf("Vars = %q, %v; want %q", vars, err, want)
	}
}

func TestEvalDoesNotAllocate(t *testing.T) {
	p, err := Compile("100 * max(0, (a / (a + b + c + d) - e / f) - (g / (a + b + c + d) - e / f)) if smt_on else min(a, b, c)", env)
	if err != nil {
		t.Fatal(err)
	}
	values := make([]float64, 32)
	for i := range values {
		values[i] = float64(i + 1)
	}
	stack := make([]float64, p.StackSize())
	if n := testing.AllocsPerRun(100, func() { p.Eval(values, stack) }); n != 0 {
		t.Errorf("Eval allocates %v times", n)
	}
}

// TestReferenceFormulasCompile parses every formula and threshold in the shared
// reference data: Intel's full-format TMA metrics for every platform and Linux
// perf's AMD and Arm metric files.
func TestReferenceFormulasCompile(t *testing.T) {
	dir := reference.Dir(t)
	any := func(string) (int, bool) { return 0, true }
	n := 0
	intel, _ := filepath.Glob(filepath.Join(dir, "intel-perfmon/*/metrics/*_metrics*.json"))
	for _, f := range intel {
		var doc struct {
			Metrics []struct {
				MetricName string
				Formula    string
				Threshold  struct{ Formula string }
			}
		}
		readJSON(t, f, &doc)
		for _, m := range doc.Metrics {
			for _, formula := range []string{m.Formula, m.Threshold.Formula} {
				if formula == "" || strings.Contains(formula, "[") {
					continue // per-socket arrays (C-state metrics) are outside this language
				}
				if _, err := Compile(formula, any); err != nil {
					t.Errorf("%s %s: %v", filepath.Base(f), m.MetricName, err)
				}
				n++
			}
		}
	}
	perf, _ := filepath.Glob(filepath.Join(dir, "linux-pmu-events/*/*/*.json"))
	more, _ := filepath.Glob(filepath.Join(dir, "linux-pmu-events/arm64/*/*/metrics.json"))
	for _, f := range append(perf, more...) {
		var metrics []struct{ MetricName, MetricExpr string }
		readJSON(t, f, &metrics)
		for _, m := range metrics {
			if m.MetricExpr == "" {
				continue
			}
			if _, err := Compile(m.MetricExpr, any); err != nil {
				t.Errorf("%s %s: %v", f[len(dir):], m.MetricName, err)
			}
			n++
		}
	}
	if n < 1000 {
		t.Errorf("only %d formulas found; the reference data looks incomplete", n)
	}
	t.Logf("%d formulas compiled", n)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		// Event files are arrays of another shape; only metric files matter here.
		if strings.Contains(path, "metrics") || strings.Contains(path, "recommended") || strings.Contains(path, "pipeline") || strings.Contains(path, "sbsa") {
			t.Fatalf("%s: %v", path, err)
		}
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{"a + b * c", "max(0, a - b) if smt_on else -c", "d_ratio(a, b)", "((a))", "a if b else c if d else e",
		"@cpu@x\\,y@ + #slots", "1e-3 * 0x1f", "a > b & c | d", "min(", "-", "a if", "UOPS_RETIRED.MS:c1:e1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Compile(s, func(string) (int, bool) { return 0, true })
		if err != nil {
			return
		}
		values := []float64{3}
		stack := make([]float64, p.StackSize())
		p.Eval(values, stack) // must not panic or overrun its stack
	})
}
