package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/host/capability"
)

func testRegistry(t *testing.T, depth *int) *Registry[*[]string] {
	t.Helper()
	r, err := New(
		Collector[*[]string]{Name: "counting", Help: "Count", Required: true, Needs: []string{capability.SystemWide}},
		Collector[*[]string]{Name: "topdown", Help: "Top-Down", Default: true, Needs: []string{capability.HardwareCounters}},
		Collector[*[]string]{Name: "cgroup", Help: "Per cgroup", Default: true, Needs: []string{capability.EBPF},
			Options: func(o Options) {
				o.Flag("depth", "cgroup.depth", "Depth.", func(f *kingpin.FlagClause) { f.Default("5").IntVar(depth) })
			}},
		Collector[*[]string]{Name: "reuse", Help: "Reuse distance"},
	)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFlagsFromTheRegistry(t *testing.T) {
	for _, c := range []struct {
		args  []string
		on    map[string]bool
		depth int
		err   string
	}{
		{[]string{"serve"}, map[string]bool{"counting": true, "topdown": true, "cgroup": true, "reuse": false}, 5, ""},
		{[]string{"serve", "--no-collector.topdown", "--collector.reuse", "--collector.cgroup.depth=2"}, map[string]bool{"topdown": false, "reuse": true}, 2, ""},
		// The option's old name still works.
		{[]string{"serve", "--cgroup.depth=3"}, map[string]bool{"cgroup": true}, 3, ""},
		// check reads the same flags, so that it judges what serve would run.
		{[]string{"check", "--no-collector.cgroup"}, map[string]bool{"cgroup": false, "topdown": true}, 5, ""},
		{[]string{"serve", "--no-collector.counting"}, nil, 0, "unknown long flag '--no-collector.counting'"},
		{[]string{"serve", "--collector.nope"}, nil, 0, "unknown long flag '--collector.nope'"},
	} {
		var depth int
		r := testRegistry(t, &depth)
		app := kingpin.New("test", "")
		app.Terminate(nil)
		r.Bind(app.Command("serve", "").Default())
		r.Bind(app.Command("check", ""))
		_, err := app.Parse(c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		for name, want := range c.on {
			if r.Enabled(name) != want {
				t.Errorf("%v: %s enabled %v, want %v", c.args, name, r.Enabled(name), want)
			}
		}
		if depth != c.depth {
			t.Errorf("%v: --collector.cgroup.depth %d, want %d", c.args, depth, c.depth)
		}
		notes := r.Deprecated()
		if old := strings.Contains(" "+strings.Join(c.args, " "), " --cgroup.depth"); old != (len(notes) == 1) || (old && notes[0] != "--cgroup.depth is deprecated: use --collector.cgroup.depth") {
			t.Errorf("%v: deprecation notes %q", c.args, notes)
		}
	}
}

func TestRegistryRefuses(t *testing.T) {
	if _, err := New(Collector[int]{Name: "a"}, Collector[int]{Name: "a"}); err == nil {
		t.Error("two collectors named a")
	}
	if _, err := New(Collector[int]{Name: "Per-CPU"}); err == nil {
		t.Error("a name that is not a label")
	}
	r := testRegistry(t, new(int))
	if err := r.Set("counting", false); err == nil {
		t.Error("switched off a required collector")
	}
	if err := r.Set("nope", true); err == nil {
		t.Error("switched on a collector not registered")
	}
	if r.Enabled("nope") {
		t.Error("a collector not registered is enabled")
	}
}

func TestStatuses(t *testing.T) {
	r := testRegistry(t, new(int))
	r.Set("topdown", false)
	rep := capability.Report{Features: []capability.Feature{
		{Name: capability.SystemWide, Available: true},
		{Name: capability.HardwareCounters, Available: false},
		{Name: capability.EBPF, Available: false},
	}}
	got := map[string]Status{}
	for _, s := range r.Statuses(rep) {
		got[s.Name] = s
	}
	for name, want := range map[string]Status{
		"counting": {Name: "counting", Enabled: true, Runs: true, Missing: []string{}},
		"topdown":  {Name: "topdown", Enabled: false, Runs: false, Missing: []string{capability.HardwareCounters}},
		"cgroup":   {Name: "cgroup", Enabled: true, Runs: false, Missing: []string{capability.EBPF}},
		"reuse":    {Name: "reuse", Enabled: false, Runs: false, Missing: []string{}},
	} {
		g := got[name]
		if g.Enabled != want.Enabled || g.Runs != want.Runs || strings.Join(g.Missing, ",") != strings.Join(want.Missing, ",") {
			t.Errorf("%s: %+v, want %+v", name, g, want)
		}
	}
}

// Build runs the enabled collectors' factories in order, live or replay
// (so each sees what the earlier ones built); a failure stops only its own
// collector, and a disabled one is not built.
func TestBuild(t *testing.T) {
	add := func(name string, err error) func(*[]string) error {
		return func(b *[]string) error {
			*b = append(*b, name)
			return err
		}
	}
	r, err := New(
		Collector[*[]string]{Name: "counting", Required: true, Live: add("counting", nil), Replay: add("counting-replay", nil)},
		Collector[*[]string]{Name: "topdown", Default: true, Live: add("topdown", errors.New("no tree"))},
		Collector[*[]string]{Name: "cgroup", Default: true, Live: add("cgroup", nil), Replay: add("cgroup-replay", nil)},
		Collector[*[]string]{Name: "reuse", Live: add("reuse", nil)},
	)
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	running, failed := r.Build(&built, false)
	if got := strings.Join(running, ","); got != "counting,cgroup" {
		t.Errorf("running %s", got)
	}
	if len(failed) != 1 || failed["topdown"] == nil {
		t.Errorf("failed %v", failed)
	}
	if got := strings.Join(built, ","); got != "counting,topdown,cgroup" {
		t.Errorf("built %q", got)
	}
	built = nil
	if running, _ := r.Build(&built, true); strings.Join(running, ",") != "counting,cgroup" || strings.Join(built, ",") != "counting-replay,cgroup-replay" {
		t.Errorf("replay: running %v, built %q", running, built)
	}
}
