package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/pmu-exporter/pmu_exporter/plan/platform"
)

type fakePlatform []struct {
	c     platform.Counter
	cpu   int
	count uint64
}

func (f fakePlatform) Read(fn func(*platform.Counter, int, uint64)) error {
	for i := range f {
		fn(&f[i].c, f[i].cpu, f[i].count)
	}
	return nil
}

// 2^33 counts of energy-pkg at RAPL's 2^-32 J are 2 J of package 1 (CPU
// 2's); the MSRs by CPU as counted; C-states by core CPU and by package;
// two controllers' 10 and 5 CAS reads are 960 bytes of package 0, two
// slices' 3 and 1 remote reads 256 bytes of package 1; link 1's 9 data
// flits sent are 64 bytes of package 0.
func TestPlatformCollector(t *testing.T) {
	src := fakePlatform{
		{platform.Counter{Kind: platform.Energy, Name: "pkg", Scale: 0x1p-32}, 2, 1 << 33},
		{platform.Counter{Kind: platform.MSR, Name: "aperf", Scale: 1}, 1, 12345},
		{platform.Counter{Kind: platform.CoreCState, Name: "c6", Scale: 1}, 3, 77},
		{platform.Counter{Kind: platform.PackageCState, Name: "c2", Scale: 1}, 0, 5},
		{platform.Counter{Kind: platform.MemoryBytes, Name: "read", Scale: 64}, 0, 10},
		{platform.Counter{Kind: platform.MemoryBytes, Name: "read", Scale: 64}, 0, 5},
		{platform.Counter{Kind: platform.LLCMissBytes, Name: "read", Locality: "remote", Scale: 64}, 2, 3},
		{platform.Counter{Kind: platform.LLCMissBytes, Name: "read", Locality: "remote", Scale: 64}, 2, 1},
		{platform.Counter{Kind: platform.UPIBytes, Name: "transmit", Link: "1", Scale: 64.0 / 9}, 0, 9},
	}
	c := NewPlatform(src, func(cpu int) string { return map[int]string{0: "0", 2: "1"}[cpu] })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP pmu_node_core_cstate_residency_cycles_total TSC cycles the core spent in a C-state (the cstate_core PMU, read on the CPU its cpumask names for the core); its rate over the TSC's is the residency share.
# TYPE pmu_node_core_cstate_residency_cycles_total counter
pmu_node_core_cstate_residency_cycles_total{cpu="3",state="c6"} 77
# TYPE pmu_node_energy_joules_total counter
pmu_node_energy_joules_total{domain="pkg",package="1"} 2
# TYPE pmu_node_llc_miss_memory_bytes_total counter
pmu_node_llc_miss_memory_bytes_total{direction="read",locality="remote",package="1"} 256
# TYPE pmu_node_memory_bytes_total counter
pmu_node_memory_bytes_total{direction="read",package="0"} 960
# TYPE pmu_node_msr_total counter
pmu_node_msr_total{cpu="1",msr="aperf"} 12345
# TYPE pmu_node_package_cstate_residency_cycles_total counter
pmu_node_package_cstate_residency_cycles_total{package="0",state="c2"} 5
# TYPE pmu_node_upi_bytes_total counter
pmu_node_upi_bytes_total{direction="transmit",link="1",package="0"} 64
`
	// Compare values only (the help texts are long): strip HELP lines.
	got, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, "pmu_node_energy_joules_total", "pmu_node_llc_miss_memory_bytes_total", "pmu_node_memory_bytes_total", "pmu_node_msr_total", "pmu_node_core_cstate_residency_cycles_total", "pmu_node_package_cstate_residency_cycles_total", "pmu_node_upi_bytes_total")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(got), "\n") {
		if !strings.HasPrefix(l, "# HELP") && l != "" {
			lines = append(lines, l)
		}
	}
	var wantLines []string
	for _, l := range strings.Split(want, "\n") {
		if !strings.HasPrefix(l, "# HELP") && l != "" {
			wantLines = append(wantLines, l)
		}
	}
	if strings.Join(lines, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 8 {
		t.Errorf("%d series (%v), want the seven and the read errors", n, err)
	}
}
