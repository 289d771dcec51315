package validate

import (
	"regexp"
	"slices"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
)

// The built-in Top-Down trees' events of the kinds a loop knows
// (retired instructions, core cycles, mispredicted branches: the names
// below, as each vendor spells them) are all in the table, each with a
// loop that exists; so a tree whose event table maps one of them to a
// wrong encoding is caught by validate on a host with a PMU. (The trees
// that take slots and cycles from PERF_METRICS have none of these; perf's
// generic instructions and cycles are validated on every host.)
func TestTreesCovered(t *testing.T) {
	loops := []string{"instruction-loop", "branch", "fresh-pages", "pipe-round-trips", "spin", "watched-writes", "pointer-chase"}
	for name, e := range Expected {
		if !slices.Contains(loops, e.Loop) {
			t.Errorf("%s: loop %q does not exist", name, e.Loop)
		}
		if e.Loop == "branch" && Signatures[e.Category] == [7]float64{} {
			t.Errorf("%s: category %q has no signature", name, e.Category)
		}
	}
	known := regexp.MustCompile(`^(INST_RETIRED\.ANY|inst_retired|ex_ret_instr|CPU_CLK_UNHALTED\.(THREAD|CORE)|cpu_cycles|ls_not_halted_cyc|BR_MISP_RETIRED\.ALL_BRANCHES|ex_ret_brn_misp|br_mis_pred)$`)
	seen := 0
	for _, uarch := range topdown.Names() {
		d, err := topdown.Builtin(uarch)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range d.Events {
			if !known.MatchString(ev.Name) {
				continue
			}
			seen++
			if _, ok := Expected[ev.Name]; !ok {
				t.Errorf("%s: %s has no loop in the table", uarch, ev.Name)
			}
		}
	}
	if seen < 10 {
		t.Errorf("only %d such events in all the trees", seen)
	}
}
