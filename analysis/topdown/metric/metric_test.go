package metric

import (
	"errors"
	"math"
	"strings"
	"testing"
)

const small = `name: small
params: [smt_on]
constants:
  width: 4
events:
  - {name: CYCLES, spec: cycles}
  - {name: FE, spec: "cpu/event=0x9c,umask=0x1/"}
  - {name: RET, spec: "cpu/event=0xc2,umask=0x2/"}
  - {name: OTHER, spec: instructions}
groups:
  - [CYCLES, FE, RET]
metrics:
  - name: slots
    level: 1
    formula: width * CYCLES / (2 if smt_on else 1)
    approximate: true
  - name: frontend_bound
    level: 1
    formula: FE / slots
    threshold: frontend_bound > 0.15
  - name: retiring
    level: 1
    formula: RET / slots
  - name: rest
    level: 1
    formula: 1 - frontend_bound - retiring
  - name: fe_latency
    level: 2
    parent: frontend_bound
    formula: frontend_bound * 0.75
  - name: fe_bandwidth
    level: 2
    parent: frontend_bound
    formula: frontend_bound * 0.25
`

func compile(t *testing.T, src string) *Tree {
	t.Helper()
	d, err := Parse("small.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := d.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func TestEvaluate(t *testing.T) {
	tree := compile(t, small)
	e := tree.NewEvaluator()
	e.Set(tree.Input("smt_on"), 0)
	e.Set(tree.Input("CYCLES"), 1000)
	e.Set(tree.Input("FE"), 800)
	e.Set(tree.Input("RET"), 2000)
	e.Eval()
	// slots = 4 × 1000 = 4000; FE 800/4000 = 0.2; RET 2000/4000 = 0.5; rest 0.3.
	for name, want := range map[string]float64{"slots": 4000, "frontend_bound": 0.2, "retiring": 0.5, "rest": 0.3, "fe_latency": 0.15, "fe_bandwidth": 0.05} {
		if got := e.Value(name); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if !e.Above("frontend_bound") || e.Above("retiring") {
		t.Error("thresholds wrong")
	}
	// SMT on halves the per-thread slots.
	e.Set(tree.Input("smt_on"), 1)
	e.Eval()
	if got := e.Value("frontend_bound"); got != 0.4 {
		t.Errorf("frontend_bound with SMT = %v, want 0.4", got)
	}
	// A missing event leaves what depends on it out, and nothing else.
	e.Reset()
	e.Set(tree.Input("CYCLES"), 1000)
	e.Set(tree.Input("FE"), 800)
	e.Eval()
	if !math.IsNaN(e.Value("retiring")) || !math.IsNaN(e.Value("rest")) || e.Value("frontend_bound") != 0.4 {
		t.Errorf("with RET missing: retiring %v rest %v fe %v", e.Value("retiring"), e.Value("rest"), e.Value("frontend_bound"))
	}
	if len(e.Violations) != 0 {
		t.Errorf("violations %v", e.Violations)
	}
	if n := testing.AllocsPerRun(100, e.Eval); n != 0 {
		t.Errorf("Eval allocates %v times", n)
	}
}

func TestContainmentViolationsAreCounted(t *testing.T) {
	tree := compile(t, strings.Replace(small, "frontend_bound * 0.25", "frontend_bound * 0.5", 1))
	e := tree.NewEvaluator()
	e.Set(tree.Input("smt_on"), 0)
	e.Set(tree.Input("CYCLES"), 1000)
	e.Set(tree.Input("FE"), 800)
	e.Set(tree.Input("RET"), 100)
	e.Eval()
	e.Eval()
	if e.Violations["frontend_bound"] != 2 {
		t.Errorf("violations = %v, want frontend_bound: 2", e.Violations)
	}
	// Not clamped away: the children keep their computed values.
	if e.Value("fe_bandwidth") != 0.1 {
		t.Errorf("fe_bandwidth = %v", e.Value("fe_bandwidth"))
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct{ edit, want string }{
		{"formula: FE / slots\n", `small.yaml:19: metric frontend_bound: formula: unknown name "FEX"`},
		{"formula: 1 - frontend_bound - retiring", "metrics form a cycle"},
		{"parent: frontend_bound\n    formula: frontend_bound * 0.75", `metric fe_latency: parent "nope" is not a metric`},
		{"level: 2\n    parent: frontend_bound\n    formula: frontend_bound * 0.25", "metric fe_bandwidth: level 3 under parent frontend_bound of level 1"},
		{"formula: RET / slots", "metric retiring: events RET, OTHER, CYCLES are not all in one group (mark it approximate"},
	}
	repl := map[string]string{
		"formula: FE / slots\n":                                                    "formula: FEX / slots\n",
		"formula: 1 - frontend_bound - retiring":                                   "formula: 1 - frontend_bound - retiring\n  - name: loop\n    level: 1\n    formula: loop2\n  - name: loop2\n    level: 1\n    formula: loop",
		"parent: frontend_bound\n    formula: frontend_bound * 0.75":               "parent: nope\n    formula: frontend_bound * 0.75",
		"level: 2\n    parent: frontend_bound\n    formula: frontend_bound * 0.25": "level: 3\n    parent: frontend_bound\n    formula: frontend_bound * 0.25",
		"formula: RET / slots":                                                     "formula: RET / slots + OTHER",
	}
	for _, c := range cases {
		d, err := Parse("small.yaml", []byte(strings.Replace(small, c.edit, repl[c.edit], 1)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Compile()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error = %v\nwant %q", err, c.want)
		}
	}
	if _, err := Parse("x.yaml", []byte("metrics: [{name: a, formla: b}]")); err == nil || !strings.Contains(err.Error(), "field formla not found") {
		t.Errorf("unknown key: %v", err)
	}
}

func TestOverride(t *testing.T) {
	base, _ := Parse("small.yaml", []byte(small))
	user, err := Parse("user.yaml", []byte(`metrics:
  - {name: retiring, level: 1, formula: RET / slots / 2}
  - {name: ipc_like, level: 1, formula: RET / CYCLES}
constants: {width: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := base.Override(user).Compile()
	if err != nil {
		t.Fatal(err)
	}
	e := tree.NewEvaluator()
	e.Set(tree.Input("smt_on"), 0)
	e.Set(tree.Input("CYCLES"), 1000)
	e.Set(tree.Input("FE"), 0)
	e.Set(tree.Input("RET"), 2000)
	e.Eval()
	// width 5: slots 5000; retiring overridden to 2000/5000/2 = 0.2; new metric 2.
	if e.Value("retiring") != 0.2 || e.Value("ipc_like") != 2 || len(tree.Metrics()) != 7 {
		t.Errorf("retiring %v ipc_like %v metrics %d", e.Value("retiring"), e.Value("ipc_like"), len(tree.Metrics()))
	}
}

func TestOverrideErrorsNameTheUserFile(t *testing.T) {
	base, _ := Parse("small.yaml", []byte(small))
	user, _ := Parse("user.yaml", []byte("metrics:\n  - name: bad\n    level: 1\n    formula: NOPE\n"))
	_, err := base.Override(user).Compile()
	if err == nil || !strings.Contains(err.Error(), `user.yaml:4: metric bad: formula: unknown name "NOPE"`) {
		t.Errorf("err = %v", err)
	}
}

// A user's file that breaks a built-in metric it does not define (here by
// moving its parent a level down) is named as the cause; its own mistakes
// keep their file and line; files that do not parse are UserErrors too.
func TestExtendNamesTheUserFile(t *testing.T) {
	base, err := Parse("base.yaml", []byte(`name: base
events:
  - {name: E, spec: cpu-clock}
metrics:
  - {name: slots, level: 0, formula: E}
  - {name: top, level: 1, formula: "0.5"}
  - {name: child, level: 2, parent: top, formula: "0.25"}
`))
	if err != nil {
		t.Fatal(err)
	}
	var ue *UserError
	_, _, err = Extend(base, "user.yaml", []byte("metrics:\n  - {name: top, level: 0, formula: \"0.5\"}\n"))
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "user.yaml: with these definitions the built-in base tree no longer compiles: ") ||
		!strings.Contains(err.Error(), "base.yaml:7: metric child: level 2 under parent top of level 0") {
		t.Errorf("broken built-in: %v", err)
	}
	_, _, err = Extend(base, "user.yaml", []byte("metrics:\n  - {name: extra, level: 1, formula: nonexistent}\n"))
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "user.yaml:2: metric extra: formula: unknown name") {
		t.Errorf("the user's own mistake: %v", err)
	}
	for _, bad := range []string{"", "\x00\xff\xfe", "metrics: 7\n", "metrics:\n  - {name: a, level: 1, formula: b}\n  - {name: b, level: 1, formula: a}\n"} {
		if _, _, err := Extend(nil, "user.yaml", []byte(bad)); !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "user.yaml: ") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	def, tree, err := Extend(base, "user.yaml", []byte("metrics:\n  - {name: extra, level: 1, formula: \"0.1\"}\n"))
	if err != nil || tree == nil || len(def.Metrics) != 4 {
		t.Errorf("a good extension: %v", err)
	}
}

// A definition built in Go has no file line: its errors name the definition
// and the metric, not a position ":0:".
func TestCompileErrorsOfGoDefinition(t *testing.T) {
	d := &Definition{Name: "built-in-go",
		Events:  []Event{{Name: "A", Spec: "cpu-clock"}, {Name: "B", Spec: "task-clock"}},
		Groups:  [][]string{{"A"}, {"B"}},
		Metrics: []Metric{{Name: "ratio", Level: 1, Formula: "A / B"}}}
	_, err := d.Compile()
	if err == nil {
		t.Fatal("A and B in two groups compiled without approximate: true")
	}
	if want := "built-in-go: metric ratio: events A, B are not all in one group"; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), ":0:") {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}
