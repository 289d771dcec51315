package platform

import (
	"reflect"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
)

// On the Intel fixture (rapl.c, msr.c, cstate.c as Sapphire Rapids'
// drivers expose them): energy on the CPU of each package its cpumask
// names (0 and 2), scaled by 2^-32 J; the MSRs on every online CPU, the
// thermal margin (a snapshot) left out; C-state residency per core and
// per package. The encodings are the drivers': energy-pkg event 0x02,
// aperf 0x01, c6-residency 0x02.
func TestSelectIntel(t *testing.T) {
	cs, err := Select(fixture.PMUs(t, fixture.IntelPlatform()), []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Counter{}
	for _, c := range cs {
		by[c.PMU+"/"+c.Event] = c
	}
	pkg := by["power/energy-pkg"]
	if pkg.Kind != Energy || pkg.Name != "pkg" || pkg.Attr.Type != 22 || pkg.Attr.Config != 2 || pkg.Scale != 0x1p-32 || pkg.Unit != "Joules" || !reflect.DeepEqual(pkg.CPUs, []int{0, 2}) {
		t.Errorf("energy-pkg: %+v", pkg)
	}
	if aperf := by["msr/aperf"]; aperf.Kind != MSR || aperf.Attr.Type != 9 || aperf.Attr.Config != 1 || aperf.Scale != 1 || !reflect.DeepEqual(aperf.CPUs, []int{0, 1, 2, 3}) {
		t.Errorf("aperf: %+v", aperf)
	}
	if _, ok := by["msr/cpu_thermal_margin"]; ok {
		t.Error("the thermal margin, a snapshot, taken as a counter")
	}
	if c6 := by["cstate_core/c6-residency"]; c6.Kind != CoreCState || c6.Name != "c6" || c6.Attr.Config != 2 || !reflect.DeepEqual(c6.CPUs, []int{0, 1, 2, 3}) {
		t.Errorf("core c6: %+v", c6)
	}
	if c2 := by["cstate_pkg/c2-residency"]; c2.Kind != PackageCState || c2.Name != "c2" || !reflect.DeepEqual(c2.CPUs, []int{0, 2}) {
		t.Errorf("package c2: %+v", c2)
	}
	if len(cs) != 4+5+2+2 {
		t.Errorf("%d counters, want 4 energy, 5 MSRs, 2 core and 2 package C-states", len(cs))
	}
	if !Has(cs, Energy) || !Has(cs, MSR, "aperf", "mperf") || !Has(cs, CoreCState) {
		t.Error("Has misses what is there")
	}
}

// AMD: energy-pkg alone, irperf among the MSRs, no C-state PMU; a VM
// like this project's (fixture.NoPMU) has the msr PMU's tsc alone: no
// energy, no frequency, no C-states.
func TestSelectAMDAndNone(t *testing.T) {
	cs, err := Select(fixture.PMUs(t, fixture.AMDPlatform()), []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if !Has(cs, Energy, "energy-pkg") || Has(cs, Energy, "energy-ram") || !Has(cs, MSR, "irperf") || Has(cs, CoreCState) || Has(cs, PackageCState) {
		t.Errorf("AMD: %+v", cs)
	}
	cs, err = Select(fixture.PMUs(t, fixture.NoPMU()), []int{0, 1})
	if err != nil || len(cs) != 1 || cs[0].Event != "tsc" || !reflect.DeepEqual(cs[0].CPUs, []int{0, 1}) || Has(cs, MSR, "aperf", "mperf") || Has(cs, Energy) {
		t.Errorf("a VM's msr/tsc alone: %+v %v", cs, err)
	}
}
