package topdown

import (
	"math"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/perfstat"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
)

// sprRecording is perf stat -x, -I 1000 -A output for the spr tree's group on two
// CPUs. CPU0 carries the hand-computed vector of TestSPRHandComputed; in the
// second interval CPU1's topdown-mem-bound was not counted.
const sprRecording = `# started on Sun Nov 22 03:00:00 2026
     1.001000000,CPU0,1000,,slots,1000000,100.00,,
     1.001000000,CPU0,400,,topdown-retiring,1000000,100.00,,
     1.001000000,CPU0,100,,topdown-bad-spec,1000000,100.00,,
     1.001000000,CPU0,200,,topdown-fe-bound,1000000,100.00,,
     1.001000000,CPU0,300,,topdown-be-bound,1000000,100.00,,
     1.001000000,CPU0,100,,topdown-heavy-ops,1000000,100.00,,
     1.001000000,CPU0,80,,topdown-br-mispredict,1000000,100.00,,
     1.001000000,CPU0,150,,topdown-fetch-lat,1000000,100.00,,
     1.001000000,CPU0,200,,topdown-mem-bound,1000000,100.00,,
     1.001000000,CPU0,10,,INT_MISC.UOP_DROPPING,1000000,100.00,,
     2.002000000,CPU1,2000,,cpu_core/slots/,1000000,100.00,,
     2.002000000,CPU1,1000,,cpu_core/topdown-retiring/,1000000,100.00,,
     2.002000000,CPU1,0,,cpu_core/topdown-bad-spec/,1000000,100.00,,
     2.002000000,CPU1,500,,cpu_core/topdown-fe-bound/,1000000,100.00,,
     2.002000000,CPU1,500,,cpu_core/topdown-be-bound/,1000000,100.00,,
     2.002000000,CPU1,0,,cpu_core/topdown-heavy-ops/,1000000,100.00,,
     2.002000000,CPU1,0,,cpu_core/topdown-br-mispredict/,1000000,100.00,,
     2.002000000,CPU1,500,,cpu_core/topdown-fetch-lat/,1000000,100.00,,
     2.002000000,CPU1,<not counted>,,cpu_core/topdown-mem-bound/,0,0.00,,
     2.002000000,CPU1,0,,int_misc.uop_dropping,1000000,100.00,,
     2.002000000,CPU1,7,,cs,1000000,100.00,,
`

func TestOfflineSPR(t *testing.T) {
	samples, err := perfstat.Parse(strings.NewReader(sprRecording))
	if err != nil {
		t.Fatal(err)
	}
	ivs, notes := Offline(tree(t, "spr"), samples, nil)
	if len(ivs) != 2 {
		t.Fatalf("%d intervals", len(ivs))
	}
	a, b := ivs[0], ivs[1]
	if a.Time != 1.001 || a.CPU != "CPU0" || b.CPU != "CPU1" {
		t.Errorf("keys: %v %s / %v %s", a.Time, a.CPU, b.Time, b.CPU)
	}
	for k, want := range map[string]float64{"frontend_bound": 0.19, "bad_speculation": 0.11, "memory_bound": 0.2, "light_operations": 0.3} {
		if math.Abs(a.Metrics[k]-want) > 1e-12 {
			t.Errorf("CPU0 %s = %v, want %v", k, a.Metrics[k], want)
		}
	}
	if !a.Above["frontend_bound"] || a.Above["retiring"] {
		t.Errorf("thresholds: %v", a.Above)
	}
	if _, ok := a.Metrics["pm_total"]; ok {
		t.Error("helper metrics are not output")
	}
	// CPU1: 2000 slots, fe 0.25, be 0.25, retiring 0.5; memory_bound not counted.
	if b.Metrics["frontend_bound"] != 0.25 || b.Metrics["retiring"] != 0.5 || b.Metrics["bad_speculation"] != 0 {
		t.Errorf("CPU1: %v", b.Metrics)
	}
	if _, ok := b.Metrics["memory_bound"]; ok {
		t.Error("memory_bound from a <not counted> input")
	}
	if _, ok := b.Metrics["core_bound"]; ok {
		t.Error("core_bound depends on memory_bound and must be absent too")
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"input PERF_METRICS.MEMORY_BOUND was not counted in some intervals", "events not used by the spr tree: cs"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes lack %q:\n%s", want, joined)
		}
	}
}

func TestMatcher(t *testing.T) {
	m := NewMatcher(tree(t, "icx"))
	tr := tree(t, "icx")
	for printed, want := range map[string]string{
		"UOPS_DECODED.DEC0:c1":  "UOPS_DECODED.DEC0:c1",
		"uops_decoded.dec0":     "UOPS_DECODED.DEC0",
		"cpu/topdown-fe-bound/": "PERF_METRICS.FRONTEND_BOUND",
		"slots:u":               "TOPDOWN.SLOTS:perf_metrics",
		"IDQ_UOPS_NOT_DELIVERED.CYCLES_0_UOPS_DELIV.CORE": "IDQ_UOPS_NOT_DELIVERED.CYCLES_0_UOPS_DELIV.CORE",
	} {
		if got := m.Input(printed); got != tr.Input(want) {
			t.Errorf("%s -> slot %d, want %s (%d)", printed, got, want, tr.Input(want))
		}
	}
	if m.Input("cpu-clock") != -1 {
		t.Error("an unrelated event matched")
	}
	zen := tree(t, "zen4")
	zm := NewMatcher(zen)
	// perf prints the spec's name= term, or the term itself when recorded by hand.
	for _, printed := range []string{"de_no_dispatch_per_slot.no_ops_from_frontend:c6", "cpu/de_no_dispatch_per_slot.no_ops_from_frontend,cmask=0x6/"} {
		if zm.Input(printed) != zen.Input("cpu/de_no_dispatch_per_slot.no_ops_from_frontend,cmask=0x6/") {
			t.Errorf("%s not matched", printed)
		}
	}
}

// TestPerfArgsParse: every tree's perf arguments parse; those of hybrid parts'
// trees name their core PMU, so that perf opens each event on that core type
// only (checked by resolving them on an Alder Lake's PMUs).
func TestPerfArgsParse(t *testing.T) {
	adl := fixture.PMUs(t, fixture.IntelAlderLake())
	for _, n := range Names() {
		d, _ := Builtin(n)
		corePMU := HybridPMU(n)
		args := PerfArgs(d, corePMU)
		seen := 0
		for i := 0; i+1 < len(args); i += 2 {
			if args[i] != "-e" {
				t.Fatalf("%s: %v", n, args)
			}
			group := strings.TrimSuffix(strings.TrimPrefix(args[i+1], "{"), "}")
			for _, spec := range splitSpecs(group) {
				if _, err := eventspec.Parse(spec); err != nil {
					t.Errorf("%s: %v", n, err)
				}
				if corePMU != "" {
					evs, err := eventspec.Resolve(spec, adl)
					if err != nil || len(evs) != 1 || evs[0].PMU != corePMU {
						t.Errorf("%s: %s on Alder Lake opens %+v, %v; want one event on %s", n, spec, evs, err, corePMU)
					}
				}
				seen++
			}
		}
		if seen < len(d.Events) {
			t.Errorf("%s: %d specs for %d events", n, seen, len(d.Events))
		}
	}
}

// splitSpecs splits a perf group on the commas outside pmu/.../ terms.
func splitSpecs(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch {
		case c == '/':
			depth ^= 1
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// A perf -G recording's cgroup lines are their own intervals, never mixed into
// the CPU's: CPU 0 in interval 1 has frontend 800 of 4000 slots, its
// container 400 of 1000.
func TestOfflineKeepsCgroupsApart(t *testing.T) {
	in := `1.0,CPU0,1000,,CPU_CLK_UNHALTED.THREAD,1,100,,
1.0,CPU0,800,,IDQ_UOPS_NOT_DELIVERED.CORE,1,100,,
1.0,CPU0,250,,CPU_CLK_UNHALTED.THREAD,pods/a,1,100,,
1.0,CPU0,400,,IDQ_UOPS_NOT_DELIVERED.CORE,pods/a,1,100,,
`
	samples, err := perfstat.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	def, _ := Builtin("skx")
	tree, err := def.Compile()
	if err != nil {
		t.Fatal(err)
	}
	ivs, _ := Offline(tree, samples, map[string]float64{"smt_on": 0})
	if len(ivs) != 2 || ivs[0].Cgroup != "" || ivs[1].Cgroup != "pods/a" {
		t.Fatalf("%+v", ivs)
	}
	if ivs[0].Metrics["frontend_bound"] != 0.2 || ivs[1].Metrics["frontend_bound"] != 0.4 {
		t.Errorf("frontend %v (CPU) and %v (cgroup), want 0.2 and 0.4", ivs[0].Metrics["frontend_bound"], ivs[1].Metrics["frontend_bound"])
	}
}

// The summary of sprRecording sums each input over both intervals: slots
// 1000 + 2000, topdown-fe-bound 200 + 500, UOP_DROPPING 10 + 0, so
// frontend_bound is (700 − 10)/3000 = 0.23, the slot-weighted mean of
// CPU0's 0.19 and CPU1's 0.25; bad_speculation (100 + 10)/3000 and
// retiring 1400/3000. topdown-mem-bound was not counted in the second
// interval: it is left out, and memory_bound with it, not summed over
// half the run.
func TestSummarizeSPR(t *testing.T) {
	samples, err := perfstat.Parse(strings.NewReader(sprRecording))
	if err != nil {
		t.Fatal(err)
	}
	sums := Summarize(tree(t, "spr"), samples, nil)
	if len(sums) != 1 || sums[0].Cgroup != "" || sums[0].Intervals != 2 {
		t.Fatalf("summaries: %+v", sums)
	}
	s := sums[0]
	for k, want := range map[string]float64{"frontend_bound": 690.0 / 3000, "bad_speculation": 110.0 / 3000, "retiring": 1400.0 / 3000, "backend_bound": 800.0 / 3000} {
		if math.Abs(s.Metrics[k]-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, s.Metrics[k], want)
		}
	}
	if _, ok := s.Metrics["memory_bound"]; ok || len(s.Partial) != 1 || !strings.Contains(s.Partial[0], "MEMORY_BOUND") {
		t.Errorf("memory_bound %v, partial %v: want it left out", s.Metrics["memory_bound"], s.Partial)
	}
	if s.Counts["TOPDOWN.SLOTS:perf_metrics"] != 3000 || s.Counts["PERF_METRICS.FRONTEND_BOUND"] != 700 {
		t.Errorf("counts %v: want slots summed to 3000, the frontend to 700", s.Counts)
	}
	if !s.Above["frontend_bound"] || s.Above["retiring"] {
		t.Errorf("thresholds %v: frontend_bound (23%% > 15%%) flagged, retiring not", s.Above)
	}
}
