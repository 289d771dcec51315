package platform

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// On the Intel fixture (rapl.c, msr.c, cstate.c as Sapphire Rapids'
// drivers expose them): energy on the CPU of each package its cpumask
// names (0 and 2), scaled by 2^-32 J; the MSRs on every online CPU, the
// thermal margin (a snapshot) left out; C-state residency per core and
// per package. The encodings are the drivers': energy-pkg event 0x02,
// aperf 0x01, c6-residency 0x02.
func TestSelectIntel(t *testing.T) {
	cs, err := Select(fixture.PMUs(t, fixture.IntelPlatform()), []int{0, 1, 2, 3}, "6")
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
	if len(cs) != 4+5+2+2+4+8+4 {
		t.Errorf("%d counters, want 4 energy, 5 MSRs, 2 core and 2 package C-states, 2 controllers' reads and writes, 2 LLC slices' 4 requests, 2 UPI links' data sent and received", len(cs))
	}
	// A UPI link's data flits, Intel's encoding (UNC_UPI_TxL_FLITS.ALL_DATA
	// event 0x02, umask 0x0f), 64/9 bytes each, on a CPU of each package.
	if tx := by["uncore_upi_1/event=0x02,umask=0x0f"]; tx.Kind != UPIBytes || tx.Name != "transmit" || tx.Link != "1" || tx.Attr.Type != 30 ||
		tx.Attr.Config != 0x0f02 || tx.Scale != 64.0/9 || !reflect.DeepEqual(tx.CPUs, []int{0, 2}) {
		t.Errorf("UPI transmit: %+v", tx)
	}
	if !Has(cs, Energy) || !Has(cs, MSR, "aperf", "mperf") || !Has(cs, CoreCState) {
		t.Error("Has misses what is there")
	}
}

// AMD: energy-pkg alone, irperf among the MSRs, no C-state PMU; a VM
// like this project's (fixture.NoPMU) has the msr PMU's tsc alone: no
// energy, no frequency, no C-states.
func TestSelectAMDAndNone(t *testing.T) {
	cs, err := Select(fixture.PMUs(t, fixture.AMDPlatform()), []int{0, 1, 2, 3}, "25")
	if err != nil {
		t.Fatal(err)
	}
	if !Has(cs, Energy, "energy-pkg") || Has(cs, Energy, "energy-ram") || !Has(cs, MSR, "irperf") || Has(cs, CoreCState) || Has(cs, PackageCState) {
		t.Errorf("AMD: %+v", cs)
	}
	cs, err = Select(fixture.PMUs(t, fixture.NoPMU()), []int{0, 1}, "25")
	if err != nil || len(cs) != 1 || cs[0].Event != "tsc" || !reflect.DeepEqual(cs[0].CPUs, []int{0, 1}) || Has(cs, MSR, "aperf", "mperf") || Has(cs, Energy) {
		t.Errorf("a VM's msr/tsc alone: %+v %v", cs, err)
	}
}

// The memory controllers' CAS counts, held to the published definitions:
// Sapphire Rapids' uncore_imc aliases encode UNC_M_CAS_COUNT.RD and .WR
// of Intel's sapphirerapids_uncore.json, and 64 bytes a count is both
// the alias's scale (6.103515625e-5 MiB) and memory_bandwidth_read's
// formula (UNC_M_CAS_COUNT.RD * 64); a Zen 4's amd_umc counters encode
// perf's umc_cas_cmd.rd and .wr (memory-controller.json), at the 64
// bytes of umc_mem_read_bandwidth. Each counts on its package's CPU.
func TestMemoryControllersAsPublished(t *testing.T) {
	ref := reference.Dir(t)
	code := func(events []reference.Event, name string) (event, mask uint64) {
		for _, e := range events {
			if e.EventName == name {
				event, _ = strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
				m := e.UMask
				if m == "" {
					m = e.RdWrMask
				}
				mask, _ = strconv.ParseUint(strings.TrimPrefix(m, "0x"), 16, 64)
				return event, mask
			}
		}
		t.Fatalf("%s is not in the reference", name)
		return 0, 0
	}
	times64 := func(metrics []reference.Metric, name string) {
		for _, m := range metrics {
			if m.MetricName == name && (strings.Contains(m.Formula, "* 64") || strings.Contains(m.MetricExpr, "* 64")) {
				return
			}
		}
		t.Errorf("%s: no formula counting 64 bytes a CAS", name)
	}
	intel, err := Select(fixture.PMUs(t, fixture.IntelPlatform()), []int{0, 1, 2, 3}, "6")
	if err != nil {
		t.Fatal(err)
	}
	spr := reference.Events(t, filepath.Join(ref, "intel-perfmon/SPR/events/sapphirerapids_uncore.json"))
	times64(reference.Metrics(t, filepath.Join(ref, "intel-perfmon/SPR/metrics/sapphirerapids_metrics.json")), "memory_bandwidth_read")
	pmus := fixture.PMUs(t, fixture.IntelPlatform())
	n := 0
	for _, c := range intel {
		if c.Kind != MemoryBytes {
			continue
		}
		n++
		ev, mask := code(spr, map[string]string{"read": "UNC_M_CAS_COUNT.RD", "write": "UNC_M_CAS_COUNT.WR"}[c.Name])
		if c.Attr.Config != ev|mask<<8 || c.Scale != 64 || !reflect.DeepEqual(c.CPUs, []int{0, 2}) {
			t.Errorf("%s %s: config %#x, scale %v, CPUs %v; want %#x, 64, [0 2]", c.PMU, c.Name, c.Attr.Config, c.Scale, c.CPUs, ev|mask<<8)
		}
		for _, p := range pmus {
			if a, ok := p.Aliases[c.Event]; ok && p.Name == c.PMU && a.Scale*(1<<20) != 64 {
				t.Errorf("%s/%s: scale %v MiB is not 64 bytes", p.Name, c.Event, a.Scale)
			}
		}
	}
	amd, err := Select(fixture.PMUs(t, fixture.AMDPlatform()), []int{0, 1, 2, 3}, "25")
	if err != nil {
		t.Fatal(err)
	}
	zen4 := reference.Events(t, filepath.Join(ref, "linux-pmu-events/x86/amdzen4/memory-controller.json"))
	times64(reference.Metrics(t, filepath.Join(ref, "linux-pmu-events/x86/amdzen4/recommended.json")), "umc_mem_read_bandwidth")
	for _, c := range amd {
		if c.Kind != MemoryBytes {
			continue
		}
		n++
		ev, mask := code(zen4, map[string]string{"read": "umc_cas_cmd.rd", "write": "umc_cas_cmd.wr"}[c.Name])
		if c.Attr.Config != ev|mask<<8 || c.Scale != 64 || !reflect.DeepEqual(c.CPUs, []int{0}) {
			t.Errorf("%s %s: config %#x, scale %v, CPUs %v; want %#x, 64, [0]", c.PMU, c.Name, c.Attr.Config, c.Scale, c.CPUs, ev|mask<<8)
		}
	}
	if n != 8 {
		t.Errorf("%d memory counters, want reads and writes of two controllers on each host", n)
	}
}

// The LLC slices' memory requests, by direction and locality, are
// Intel's UNC_CHA_REQUESTS.READS_LOCAL, READS_REMOTE, WRITES_LOCAL and
// WRITES_REMOTE (sapphirerapids_uncore.json), 64 bytes each as
// llc_miss_local_memory_bandwidth_read and its siblings count them.
func TestLLCMissesAsPublished(t *testing.T) {
	ref := reference.Dir(t)
	spr := reference.Events(t, filepath.Join(ref, "intel-perfmon/SPR/events/sapphirerapids_uncore.json"))
	metrics := reference.Metrics(t, filepath.Join(ref, "intel-perfmon/SPR/metrics/sapphirerapids_metrics.json"))
	cs, err := Select(fixture.PMUs(t, fixture.IntelPlatform()), []int{0, 1, 2, 3}, "6")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cs {
		if c.Kind != LLCMissBytes {
			continue
		}
		n++
		name := "UNC_CHA_REQUESTS." + strings.ToUpper(c.Name) + "S_" + strings.ToUpper(c.Locality)
		var want uint64
		found := false
		for _, e := range spr {
			if e.EventName == name {
				ev, _ := strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
				um, _ := strconv.ParseUint(strings.TrimPrefix(e.UMask, "0x"), 16, 64)
				want, found = ev|um<<8, true
			}
		}
		if !found || c.Attr.Config != want || c.Scale != 64 || !reflect.DeepEqual(c.CPUs, []int{0, 2}) {
			t.Errorf("%s %s %s: config %#x (%s: %#x, found %v), scale %v, CPUs %v", c.PMU, c.Name, c.Locality, c.Attr.Config, name, want, found, c.Scale, c.CPUs)
		}
		metric := "llc_miss_" + c.Locality + "_memory_bandwidth_" + c.Name
		ok := false
		for _, m := range metrics {
			if m.MetricName == metric && strings.Contains(m.Formula, "* 64") && len(m.Events) == 1 && m.Events[0].Name == name {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: no %s counting %s × 64", c.PMU, metric, name)
		}
	}
	if n != 8 {
		t.Errorf("%d LLC miss counters, want 4 on each of 2 slices", n)
	}
}

// A UPI link's data sent and received are Intel's
// UNC_UPI_TxL_FLITS.ALL_DATA and UNC_UPI_RxL_FLITS.ALL_DATA, the same
// encoding on Skylake-SP, Ice Lake-SP and Sapphire Rapids
// (*_uncore.json), 64/9 bytes a flit as upi_data_transmit_bw and
// upi_data_receive_bw count them.
func TestUPIAsPublished(t *testing.T) {
	ref := reference.Dir(t)
	cs, err := Select(fixture.PMUs(t, fixture.IntelPlatform()), []int{0, 1, 2, 3}, "6")
	if err != nil {
		t.Fatal(err)
	}
	for _, plat := range []string{"SKX/events/skylakex_uncore.json", "ICX/events/icelakex_uncore.json", "SPR/events/sapphirerapids_uncore.json"} {
		events := reference.Events(t, filepath.Join(ref, "intel-perfmon", plat))
		metrics := reference.Metrics(t, filepath.Join(ref, "intel-perfmon", strings.Replace(strings.Replace(plat, "events", "metrics", 1), "_uncore", "_metrics", 1)))
		n := 0
		for _, c := range cs {
			if c.Kind != UPIBytes {
				continue
			}
			n++
			name := map[string]string{"transmit": "UNC_UPI_TxL_FLITS.ALL_DATA", "receive": "UNC_UPI_RxL_FLITS.ALL_DATA"}[c.Name]
			var want uint64
			for _, e := range events {
				if e.EventName == name {
					ev, _ := strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
					um, _ := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(e.UMask), "0x"), 16, 64)
					want = ev | um<<8
				}
			}
			if c.Attr.Config != want || c.Scale != 64.0/9 {
				t.Errorf("%s: %s %s: config %#x, %s is %#x; scale %v", plat, c.PMU, c.Name, c.Attr.Config, name, want, c.Scale)
			}
			ok := false
			for _, m := range metrics {
				if m.MetricName == "upi_data_"+c.Name+"_bw" && strings.Contains(m.Formula, "(64 / 9.0)") && len(m.Events) == 1 && m.Events[0].Name == name {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: no upi_data_%s_bw counting %s × 64/9", plat, c.Name, name)
			}
		}
		if n != 4 {
			t.Errorf("%d UPI counters, want 2 directions on each of 2 links", n)
		}
	}
}

// Zen 4's data fabric counts its DRAM's traffic by requester: every
// coherent station's {local,remote}_processor_{read,write}_data_beats
// event, each held to perf's data-fabric.json (transcribed in testdata:
// its event select and umask, placed by the amd_df format's bits as
// amd/uncore.c's event14v2 and umask12 place them), the twelve stations
// of each direction and requester being exactly the terms of perf's
// dram_*_data_for_*_processor metric (recommended.json, in the
// reference), whose scale is 64 bytes a beat. On the package's CPU its
// cpumask names. Zen 3's data fabric (another format) and Zen 5 (another
// family, other events) count none.
func TestDRAMAsPublished(t *testing.T) {
	data, err := os.ReadFile("testdata/amdzen4-data-fabric.json")
	if err != nil {
		t.Fatal(err)
	}
	var df []struct{ EventName, EventCode, UMask string }
	if err := json.Unmarshal(data, &df); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{} // perf's name → config
	for _, e := range df {
		ev, _ := strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
		um, _ := strconv.ParseUint(strings.TrimPrefix(e.UMask, "0x"), 16, 64)
		want[e.EventName] = ev&0xff | (ev>>8)<<32 | (um&0xff)<<8 | (um>>8)<<24
	}
	data, err = os.ReadFile(filepath.Join(reference.Dir(t), "linux-pmu-events/x86/amdzen4/recommended.json"))
	if err != nil {
		t.Fatal(err)
	}
	var metrics []struct{ MetricName, MetricExpr, ScaleUnit string }
	if err := json.Unmarshal(data, &metrics); err != nil {
		t.Fatal(err)
	}
	terms := map[[2]string][]string{} // (direction, requester) → the metric's events
	for _, m := range metrics {
		var dir, loc string
		if _, err := fmt.Sscanf(strings.ReplaceAll(m.MetricName, "_", " "), "dram %s data for %s processor", &dir, &loc); err != nil {
			continue
		}
		if m.ScaleUnit != "6.103515625e-5MiB" { // 64 bytes
			t.Errorf("%s: scale %s, not 64 bytes a beat", m.MetricName, m.ScaleUnit)
		}
		for _, term := range strings.Split(m.MetricExpr, "+") {
			terms[[2]string{dir, loc}] = append(terms[[2]string{dir, loc}], strings.TrimSpace(term))
		}
	}
	if len(terms) != 4 {
		t.Fatalf("recommended.json: %d dram_*_data_for_*_processor metrics, want 4", len(terms))
	}
	cs, err := Select(fixture.PMUs(t, fixture.AMDPlatform()), []int{0, 1, 2, 3}, "25")
	if err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]map[uint64]bool{}
	for _, c := range cs {
		if c.Kind != DRAMBytes {
			continue
		}
		k := [2]string{c.Name, c.Locality}
		if got[k] == nil {
			got[k] = map[uint64]bool{}
		}
		got[k][c.Attr.Config] = true
		if c.Scale != 64 || c.PMU != "amd_df" || !reflect.DeepEqual(c.CPUs, []int{0}) {
			t.Errorf("%s %s: scale %v, PMU %s, CPUs %v; want 64 bytes on amd_df's CPU 0", c.Event, c.Name, c.Scale, c.PMU, c.CPUs)
		}
	}
	for k, names := range terms {
		configs := map[uint64]bool{}
		for _, n := range names {
			cfg, ok := want[n]
			if !ok {
				t.Errorf("%v: %s is not in data-fabric.json", k, n)
			}
			configs[cfg] = true
		}
		if len(configs) != 12 || !reflect.DeepEqual(got[k], configs) {
			t.Errorf("DRAM %s for the %s processor: configs %v, want the metric's twelve %v", k[0], k[1], got[k], configs)
		}
	}
	// xGMI: counted where the data fabric's cpumask names more than one
	// package (links between them), each link's event held to
	// data-fabric.json and to the terms of perf's
	// local_socket_outbound_data_from_all_links (64 bytes a beat).
	var links []string
	for _, m := range metrics {
		if m.MetricName == "local_socket_outbound_data_from_all_links" {
			if m.ScaleUnit != "6.103515625e-5MiB" {
				t.Errorf("%s: scale %s, not 64 bytes a beat", m.MetricName, m.ScaleUnit)
			}
			for _, term := range strings.Split(m.MetricExpr, "+") {
				links = append(links, strings.TrimSpace(term))
			}
		}
	}
	if Has(cs, XGMIBytes) {
		t.Error("xGMI links counted on a data fabric of one package")
	}
	twoPackages := fixture.Merge(fixture.AMDPlatform(), fixture.Host{"sys/bus/event_source/devices/amd_df/cpumask": "0,2\n"})
	cs, err = Select(fixture.PMUs(t, twoPackages), []int{0, 1, 2, 3}, "25")
	if err != nil {
		t.Fatal(err)
	}
	gotLinks := map[string]uint64{}
	for _, c := range cs {
		if c.Kind == XGMIBytes {
			gotLinks[c.Link] = c.Attr.Config
			if c.Scale != 64 || c.Name != "transmit" || !reflect.DeepEqual(c.CPUs, []int{0, 2}) {
				t.Errorf("xGMI link %s: scale %v, %s, CPUs %v; want 64 bytes sent, on CPUs 0 and 2", c.Link, c.Scale, c.Name, c.CPUs)
			}
		}
	}
	if len(links) != 8 || len(gotLinks) != 8 {
		t.Errorf("xGMI: the metric sums %d links, %d counted", len(links), len(gotLinks))
	}
	for _, n := range links {
		link := strings.TrimPrefix(n, "local_socket_outbound_data_beats_link")
		if cfg, ok := want[n]; !ok || gotLinks[link] != cfg {
			t.Errorf("xGMI %s: config %#x, data-fabric.json's %#x (%v)", n, gotLinks[link], cfg, ok)
		}
	}
	for name, pmus := range map[string]fixture.Host{
		"Zen 3 (event14)": fixture.Merge(fixture.AMDPlatform(), fixture.Host{"sys/bus/event_source/devices/amd_df/format/event": "config:0-7,32-35,59-60\n"}),
	} {
		cs, err := Select(fixture.PMUs(t, pmus), []int{0, 1, 2, 3}, "25")
		if err != nil || Has(cs, DRAMBytes) {
			t.Errorf("%s: DRAM counters %v (%v)", name, Has(cs, DRAMBytes), err)
		}
	}
	if cs, err := Select(fixture.PMUs(t, fixture.AMDPlatform()), []int{0, 1, 2, 3}, "26"); err != nil || Has(cs, DRAMBytes) {
		t.Errorf("Zen 5 (family 26): DRAM counters %v (%v): its data fabric's events are others", Has(cs, DRAMBytes), err)
	}
}
