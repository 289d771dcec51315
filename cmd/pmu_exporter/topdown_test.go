package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric/expr"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// Intel's trees carry toplev's thresholds and the AMD and Arm trees none,
// where the summary says so instead of flagging (their definitions: the
// threshold lines of analysis/topdown/defs).
func TestTreesWithThresholds(t *testing.T) {
	for uarch, want := range map[string]bool{"spr": true, "skx": true, "icx": true, "grt": true, "zen4": false, "zen5": false, "neoverse-n2": false} {
		def, err := topdown.Builtin(uarch)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := def.Compile()
		if err != nil {
			t.Fatal(err)
		}
		if got := hasThresholds(tree); got != want {
			t.Errorf("%s: thresholds %v, want %v", uarch, got, want)
		}
	}
}

// `topdown --uarch skx --level 3` (and icx) on a recording of every event
// the level needs (random counts, SMT off) prints each of Intel's level-3
// nodes as Intel's own formula computes it from the same counts, straight
// from Skylake-SP's (Ice Lake-SP's) perfmon metrics; at the default level
// it prints none.
func TestTopdownLevel3MatchesIntelFormulas(t *testing.T) {
	for _, c := range []struct {
		uarch, metrics string
		nodes          int
	}{{"skx", "SKX/metrics/skylakex_metrics.json", 25}, {"icx", "ICX/metrics/icelakex_metrics.json", 25},
		{"spr", "SPR/metrics/sapphirerapids_metrics.json", 28}, {"srf", "SRF/metrics/sierraforest_metrics.json", 16},
		{"gnr", "GNR/metrics/graniterapids_metrics.json", 33}, {"adl", "ADL/metrics/alderlake_metrics_goldencove_core.json", 28},
		{"icl", "ICL/metrics/icelake_metrics.json", 26}} {
		t.Run(c.uarch, func(t *testing.T) { topdownAtLevel(t, c.uarch, c.metrics, 3, c.nodes) })
	}
}

// `topdown --level 6 --tsc-hz 2.1e9` on a recording of every event levels 4
// to 6 need prints each of Intel's nodes below level 3 (but those the tree
// says it does not count: Granite Rapids' that rest on sampled retire
// latencies) as Intel's own formula computes it from the same counts,
// Intel's SYSTEM_TSC_FREQ the TSC's rate over a duration of 1000 ms; without
// --tsc-hz it says to pass it.
func TestTopdownDeepLevelsMatchIntelFormulas(t *testing.T) {
	for _, c := range []struct {
		uarch, metrics string
		nodes          int
	}{{"skx", "SKX/metrics/skylakex_metrics.json", 65}, {"spr", "SPR/metrics/sapphirerapids_metrics.json", 74},
		{"gnr", "GNR/metrics/graniterapids_metrics.json", 74 - 28}, {"icl", "ICL/metrics/icelake_metrics.json", 65},
		{"skl", "SKL/metrics/skylake_metrics.json", 61}, {"clx", "CLX/metrics/cascadelakex_metrics.json", 66},
		{"icx", "ICX/metrics/icelakex_metrics.json", 68}, {"emr", "EMR/metrics/emeraldrapids_metrics.json", 74},
		{"adl", "ADL/metrics/alderlake_metrics_goldencove_core.json", 69}} {
		t.Run(c.uarch, func(t *testing.T) { topdownAtLevel(t, c.uarch, c.metrics, 6, c.nodes) })
	}
	var stdout, stderr strings.Builder
	file := filepath.Join(t.TempDir(), "empty.csv")
	os.WriteFile(file, []byte("1.000000000,1,,CPU_CLK_UNHALTED.THREAD,1000000000,100.00,,\n"), 0o644)
	if code := run([]string{"topdown", "--uarch", "skx", "--smt", "off", "--level", "4", file}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "pass --tsc-hz") {
		t.Errorf("level 4 without --tsc-hz: exit %d, %s", code, stderr.String())
	}
}

// tscHz is the TSC frequency topdownAtLevel's deep levels are given.
const tscHz = 2.1e9

func topdownAtLevel(t *testing.T, uarch, metrics string, level, nodes int) {
	def, err := topdown.Builtin(uarch)
	if err != nil {
		t.Fatal(err)
	}
	cut, err := def.Prune(level, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	counts := map[string]float64{}
	var csv strings.Builder
	for _, e := range cut.Events {
		counts[e.Name] = float64(rng.IntN(1_000_000) + 1000)
		fmt.Fprintf(&csv, "1.000000000,%.0f,,%s,1000000000,100.00,,\n", counts[e.Name], e.Name)
	}
	file := filepath.Join(t.TempDir(), "skx-level3.csv")
	os.WriteFile(file, []byte(csv.String()), 0o644)
	var out struct {
		Intervals []struct{ Metrics map[string]float64 }
	}
	var stdout, stderr strings.Builder
	args := []string{"topdown", "--uarch", uarch, "--smt", "off", "--level", strconv.Itoa(level), "--format", "json", file}
	if level > 3 {
		args = append(args, "--tsc-hz", strconv.FormatFloat(tscHz, 'g', -1, 64))
	}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("topdown exited %d: %s", code, stderr.String())
	}
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil || len(out.Intervals) != 1 {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	got := out.Intervals[0].Metrics
	var doc struct {
		Metrics []struct {
			MetricName, Formula, Category string
			Level                         int
			Events, Constants             []struct{ Name, Alias string }
		}
	}
	b, err := os.ReadFile(filepath.Join(reference.Dir(t), "intel-perfmon", metrics))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, m := range doc.Metrics {
		if m.Category != "TMA" || m.Level != level && (level == 3 || m.Level < 4) || slices.Contains(def.Uncounted, strings.ToLower(m.MetricName)) {
			continue
		}
		names := map[string]string{} // alias -> event or constant
		for _, e := range append(m.Events, m.Constants...) {
			names[e.Alias] = e.Name
		}
		var slots []float64
		prog, err := expr.Compile(m.Formula, func(alias string) (int, bool) {
			name := names[alias]
			if name == "FP_ARITH_INST_RETIRED.128B_PACKED_DOUBLE:u0xfc" {
				name = "FP_ARITH_INST_RETIRED.VECTOR" // the same encoding (TestSameEncodings)
			}
			v, ok := counts[strings.ReplaceAll(name, "=", "")]
			switch name {
			case "HYPERTHREADING_ON":
				v, ok = 0, true // recorded with SMT off
			case "THREADS_PER_CORE":
				v, ok = 1, true
			case "SYSTEM_TSC_FREQ":
				v, ok = tscHz, true
			case "DURATIONTIMEINMILLISECONDS":
				v, ok = 1000, true
			}
			if n, err := strconv.ParseFloat(name, 64); err == nil {
				v, ok = n, true // a numeric constant
			}
			slots = append(slots, v)
			return len(slots) - 1, ok
		})
		if err != nil {
			t.Fatalf("%s: %v: an input not among the events of --level %d", m.MetricName, err, level)
		}
		want := prog.Eval(slots, make([]float64, prog.StackSize())) / 100
		name := strings.ToLower(m.MetricName)
		if g, ok := got[name]; !ok || math.Abs(g-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: topdown prints %v (present %v), Intel's formula gives %v", name, g, ok, want)
		}
		checked++
	}
	if checked != nodes {
		t.Errorf("checked %d nodes at level %d, Intel publishes %d", checked, level, nodes)
	}
	stdout.Reset()
	if code := run([]string{"topdown", "--uarch", uarch, "--smt", "off", "--format", "json", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("topdown exited %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), `"l1_bound"`) {
		t.Error("level 3 printed at the default level")
	}
}

// A recording whose header names the tree it was made for is computed with
// that tree without --uarch, exactly as with it (issue 57: this host's
// tree was used, and computed nothing); a recording of software events
// only is told apart from a wrong tree.
func TestTopdownTreeFromHeader(t *testing.T) {
	const file = "../../examples/replay/skx-synthetic.csv"
	var named, given, stderr strings.Builder
	if code := run([]string{"topdown", "--smt", "off", file}, &named, &stderr); code != 0 {
		t.Fatalf("without --uarch: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "note: --uarch skx, as "+file+"'s header names it") {
		t.Errorf("no note of the tree the header names: %s", stderr.String())
	}
	given.Reset()
	if code := run([]string{"topdown", "--uarch", "skx", "--smt", "off", file}, &given, &stderr); code != 0 || given.String() != named.String() {
		t.Errorf("--uarch skx: exit %d, output differs from the header's tree:\n%s\n---\n%s", code, given.String(), named.String())
	}
	stderr.Reset()
	if code := run([]string{"topdown", "--uarch", "skx", "--smt", "off", "../../examples/replay/vm-software-events.csv"}, &given, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "holds software events only") {
		t.Errorf("software events only: exit %d: %s", code, stderr.String())
	}
}
