package topdown

import (
	"slices"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
)

// TestBuiltinGroupsFit: every group of every tree fits the general-purpose
// counters its CPUs have per thread with SMT on — 4 on Intel cores before Golden
// Cove (CPUID.0AH with HT), 8 on Golden Cove, 6 on AMD Zen (PerfCtrExtCore).
func TestBuiltinGroupsFit(t *testing.T) {
	cases := []struct {
		uarch   string
		host    fixture.Host
		corePMU string
		intel   bool
		gp      int
	}{
		{"skx", fixture.IntelSkylake(), "", true, 4},
		{"icx", fixture.IntelIcelake(), "", true, 4},
		{"spr", fixture.IntelSapphireRapids(), "", true, 8},
		{"gnr", fixture.IntelSapphireRapids(), "", true, 8},
		{"srf", fixture.IntelIcelake(), "", true, 8},
		{"adl", fixture.IntelAlderLake(), "cpu_core", true, 8},
		{"grt", fixture.IntelAlderLake(), "cpu_atom", true, 6}, // Gracemont: 6 (Counter "0,1,2,3,4,5")
		{"zen4", fixture.AMDZen3(), "", false, 6},
		{"zen5", fixture.AMDZen3(), "", false, 6},
	}
	for _, c := range cases {
		d, _ := Builtin(c.uarch)
		pmus := fixture.PMUs(t, c.host)
		if err := CheckFit(d, pmus, c.corePMU, c.intel, c.gp); err != nil {
			t.Error(err)
		}
	}
	// Hand-counted: skx's first group is 2 fixed (cycles, instructions) + 4
	// general-purpose, THREAD_ANY among them since fixed counter 1 is taken.
	d, _ := Builtin("skx")
	need, err := GeneralPurposeNeeded(d, fixture.PMUs(t, fixture.IntelSkylake()), "", true)
	if err != nil || need[0] != 4 {
		t.Errorf("skx group 0 needs %v, %v; want 4", need, err)
	}
	// spr: slots on fixed 3, eight PERF_METRICS fields on none, one GP event.
	d, _ = Builtin("spr")
	need, err = GeneralPurposeNeeded(d, fixture.PMUs(t, fixture.IntelSapphireRapids()), "", true)
	if err != nil || need[0] != 1 {
		t.Errorf("spr group 0 needs %v, %v; want 1", need, err)
	}
	// grt: cycles on fixed 1, then four general-purpose events in each of
	// level 2's groups, and six, five and five in level 3's.
	d, _ = Builtin("grt")
	need, err = GeneralPurposeNeeded(d, fixture.PMUs(t, fixture.IntelAlderLake()), "cpu_atom", true)
	if err != nil || !slices.Equal(need, []int{4, 4, 6, 5, 5}) {
		t.Errorf("grt needs %v, %v; want [4 4 6 5 5]", need, err)
	}
}

func TestCheckFitNamesTheGroup(t *testing.T) {
	d, err := metric.Parse("user.yaml", []byte(`name: big
events:
  - {name: A, spec: "cpu/event=0xc2,umask=0x2/"}
  - {name: B, spec: "cpu/event=0xc2,umask=0x4/"}
  - {name: C, spec: "cpu/event=0x0e,umask=0x1/"}
  - {name: D, spec: "cpu/event=0x0d,umask=0x1/"}
  - {name: E, spec: "cpu/event=0x9c,umask=0x1/"}
  - {name: CYC, spec: cycles}
groups: [[CYC, A, B, C, D, E]]
metrics:
  - {name: slots, level: 0, formula: CYC}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = CheckFit(d, fixture.PMUs(t, fixture.IntelSkylake()), "", true, 4)
	if err == nil || !strings.Contains(err.Error(), "big: group 0 ([CYC A B C D E]) needs 5 general-purpose counters; this CPU has 4") {
		t.Errorf("err = %v", err)
	}
	// On AMD nothing is fixed: all six need a counter, and six fit.
	if err := CheckFit(d, fixture.PMUs(t, fixture.AMDZen3()), "", false, 6); err != nil {
		t.Errorf("AMD: %v", err)
	}
}
