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
// cpumask names. Zen 3's data fabric (another format) counts none, and
// Zen 5 (another family) counts its own events (TestZen5DataFabricAsPublished).
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
	if cs, err := Select(fixture.PMUs(t, fixture.AMDPlatform()), []int{0, 1, 2, 3}, "23"); err != nil || Has(cs, DRAMBytes) {
		t.Errorf("Zen 2 (family 23) with a PerfMonV2 format: DRAM counters %v (%v)", Has(cs, DRAMBytes), err)
	}
}

// dfConfigs are a data-fabric.json's events as amd_df configs, by perf's
// name: the event select and umask placed by the PerfMonV2 format's bits
// (amd/uncore.c's event14v2 and umask12).
func dfConfigs(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var df []struct{ EventName, EventCode, UMask string }
	if err := json.Unmarshal(data, &df); err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, e := range df {
		ev, _ := strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
		um, _ := strconv.ParseUint(strings.TrimPrefix(e.UMask, "0x"), 16, 64)
		out[e.EventName] = ev&0xff | (ev>>8)<<32 | (um&0xff)<<8 | (um>>8)<<24
	}
	return out
}

// Zen 5's data fabric: reads of every DRAM channel, which Zen 5 does not
// split by requester (local_or_remote), and writes for the local and the
// remote socket; on two packages also what each cross-socket link sends
// and receives. Each event is held to perf's amdzen5 data-fabric.json
// (transcribed in testdata), and each set of them, by direction and
// requester or link direction, to the terms of the recommended.json
// metric (in the reference) that sums them at 64 bytes a beat
// (6.4e-5 MB): dram_read_bandwidth_for_local_or_remote_socket,
// dram_write_bandwidth_for_{local,remote}_socket and
// cross_socket_{outbound,inbound}_data_bandwidth_for_local_socket.
// local_or_remote writes are not counted: local and remote add up to them.
func TestZen5DataFabricAsPublished(t *testing.T) {
	want := dfConfigs(t, "testdata/amdzen5-data-fabric.json")
	metrics := reference.Metrics(t, filepath.Join(reference.Dir(t), "linux-pmu-events/x86/amdzen5/recommended.json"))
	terms := map[[2]string][]string{}
	for key, name := range map[[2]string]string{
		{"read", "local_or_remote"}: "dram_read_bandwidth_for_local_or_remote_socket",
		{"write", "local"}:          "dram_write_bandwidth_for_local_socket",
		{"write", "remote"}:         "dram_write_bandwidth_for_remote_socket",
		{"transmit", "link"}:        "cross_socket_outbound_data_bandwidth_for_local_socket",
		{"receive", "link"}:         "cross_socket_inbound_data_bandwidth_for_local_socket",
	} {
		found := false
		for _, m := range metrics {
			if m.MetricName != name {
				continue
			}
			found = true
			if m.ScaleUnit != "6.4e-5MB/s" {
				t.Errorf("%s: scale %s, not 64 bytes a beat", name, m.ScaleUnit)
			}
			sum, _, _ := strings.Cut(strings.Trim(m.MetricExpr, "()"), ") / duration_time")
			for _, term := range strings.Split(sum, "+") {
				terms[key] = append(terms[key], strings.TrimSpace(term))
			}
		}
		if !found {
			t.Fatalf("%s is not in Zen 5's recommended.json", name)
		}
	}
	twoPackages := fixture.Merge(fixture.AMDPlatform(), fixture.Host{"sys/bus/event_source/devices/amd_df/cpumask": "0,2\n"})
	cs, err := Select(fixture.PMUs(t, twoPackages), []int{0, 1, 2, 3}, "26")
	if err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]map[uint64]bool{}
	for _, c := range cs {
		var key [2]string
		switch c.Kind {
		case DRAMBytes:
			key = [2]string{c.Name, c.Locality}
		case XGMIBytes:
			key = [2]string{c.Name, "link"}
		default:
			continue
		}
		if got[key] == nil {
			got[key] = map[uint64]bool{}
		}
		got[key][c.Attr.Config] = true
		if c.Scale != 64 || c.PMU != "amd_df" || !reflect.DeepEqual(c.CPUs, []int{0, 2}) {
			t.Errorf("%s %v: scale %v, PMU %s, CPUs %v; want 64 bytes on amd_df's CPUs 0 and 2", c.Event, key, c.Scale, c.PMU, c.CPUs)
		}
	}
	if len(got) != len(terms) {
		t.Errorf("counted %d kinds of data fabric traffic, the metrics %d: %v", len(got), len(terms), got)
	}
	for key, names := range terms {
		configs := map[uint64]bool{}
		for _, n := range names {
			cfg, ok := want[n]
			if !ok {
				t.Errorf("%v: %s is not in data-fabric.json", key, n)
			}
			configs[cfg] = true
		}
		if !reflect.DeepEqual(got[key], configs) {
			t.Errorf("%v: configs %v, want the metric's %d: %v", key, got[key], len(configs), configs)
		}
	}
	// Zen 5's memory controllers: the same amd_umc CAS counts as Zen 4's,
	// held to Zen 5's memory-controller.json and its umc_mem_*_bandwidth
	// (64 bytes a CAS).
	mc := reference.Events(t, "testdata/amdzen5-memory-controller.json")
	codes := map[string]uint64{}
	for _, e := range mc {
		ev, _ := strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
		m, _ := strconv.ParseUint(strings.TrimPrefix(e.RdWrMask, "0x"), 16, 64)
		codes[e.EventName] = ev | m<<8
	}
	for _, dir := range []string{"read", "write"} {
		name := map[string]string{"read": "umc_mem_read_bandwidth", "write": "umc_mem_write_bandwidth"}[dir]
		cas := map[string]string{"read": "umc_cas_cmd.rd", "write": "umc_cas_cmd.wr"}[dir]
		ok := false
		for _, m := range metrics {
			ok = ok || m.MetricName == name && m.MetricExpr == "("+cas+" * 64) / 1e6 / duration_time"
		}
		if !ok {
			t.Errorf("Zen 5's recommended.json has no %s of %s × 64", name, cas)
		}
		n := 0
		for _, c := range cs {
			if c.Kind == MemoryBytes && c.Name == dir {
				n++
				if c.Attr.Config != codes[cas] || c.Scale != 64 {
					t.Errorf("%s %s: config %#x, scale %v; want %s's %#x, 64", c.PMU, dir, c.Attr.Config, c.Scale, cas, codes[cas])
				}
			}
		}
		if n != 2 {
			t.Errorf("%d %s counters of the memory controllers, want 2", n, dir)
		}
	}
}

// An Arm CMN mesh counts its home nodes' requests to the memory
// controllers and their retries: hnf_mc_reqs and hnf_mc_retries, held to
// perf's cmn.json (node type 0x5, the HN-F, and eventid placed by
// arm-cmn.c's format) and to the terms of its mc_message_retry_rate, for
// the parts its Compat names (the identifier's part number); on the CPU
// the cpumask names, one count a request. Not bytes: no memory bandwidth.
// A CMN S3 (part 0x43e, whose HN-S events are others) counts none.
func TestArmCMNAsPublished(t *testing.T) {
	data, err := os.ReadFile("testdata/arm-cmn.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Events  []struct{ EventName, EventidCode, NodeType, Compat string }
		Metrics []struct{ MetricName, MetricExpr, Compat string }
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	configs := map[string]uint64{}
	for _, e := range ref.Events {
		id, _ := strconv.ParseUint(strings.TrimPrefix(e.EventidCode, "0x"), 16, 64)
		typ, _ := strconv.ParseUint(strings.TrimPrefix(e.NodeType, "0x"), 16, 64)
		configs[e.EventName] = typ | id<<16
		if e.Compat != "(434|436|43c|43a).*" {
			t.Errorf("%s: Compat %s", e.EventName, e.Compat)
		}
	}
	if len(ref.Metrics) != 1 || ref.Metrics[0].MetricExpr != "hnf_mc_retries / hnf_mc_reqs" {
		t.Fatalf("mc_message_retry_rate: %+v", ref.Metrics)
	}
	cs, err := Select(fixture.PMUs(t, fixture.ArmCMNPlatform()), []int{0, 1, 2, 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Counter{}
	for _, c := range cs {
		if c.Kind == MemoryRequests {
			got[c.Name] = c
		}
		if c.Kind == MemoryBytes {
			t.Errorf("memory bytes counted from a CMN: %+v", c)
		}
	}
	for name, event := range map[string]string{"sent": "hnf_mc_reqs", "retried": "hnf_mc_retries"} {
		c := got[name]
		if c.PMU != "arm_cmn_0" || c.Attr.Type != 10 || c.Attr.Config != configs[event] || c.Scale != 1 || !reflect.DeepEqual(c.CPUs, []int{0}) {
			t.Errorf("%s (%s): %+v; want arm_cmn_0 type 10, config %#x, on CPU 0", name, event, c, configs[event])
		}
	}
	if len(got) != 2 {
		t.Errorf("%d memory controller counters, want sent and retried", len(got))
	}
	s3 := fixture.Merge(fixture.ArmCMNPlatform(), fixture.Host{"sys/bus/event_source/devices/arm_cmn_0/identifier": "43e00\n"})
	if cs, err := Select(fixture.PMUs(t, s3), []int{0, 1, 2, 3}, ""); err != nil || Has(cs, MemoryRequests) {
		t.Errorf("CMN S3: memory controller requests %v (%v), want none", Has(cs, MemoryRequests), err)
	}
}

// An NXP i.MX 8M's DDR controller counts the bytes read and written: for
// each part its identifier names, the events and bytes a count of perf's
// imx8m*_ddr_{read,write}.all (metrics.json, transcribed in testdata):
// read and write cycles × 16 on the 8M Mini and Quad, × 8 on the Nano
// (the products in the MetricExpr); the enhanced AXI filter's byte count
// for every master on the Plus (axid-read with axi_mask=0xffff,
// axi_id=0, placed in config1 as the driver's format says). The cycle
// events' codes are ddrc.json's. A part with no published formula (the
// 8QXP's DDR PMU has no identifier) counts none.
func TestIMX8MDDRAsPublished(t *testing.T) {
	data, err := os.ReadFile("testdata/imx8m-ddr.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Events  []struct{ EventName, EventCode, Compat string }
		Metrics []struct{ MetricName, MetricExpr, Compat string }
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	code := map[string]uint64{}
	for _, e := range ref.Events {
		v, _ := strconv.ParseUint(strings.TrimPrefix(e.EventCode, "0x"), 16, 64)
		code[strings.TrimPrefix(e.EventName, "imx8mm_ddr.")] = v
	}
	type want struct {
		config, config1 uint64
		bytes           float64
	}
	wants := map[[2]string]want{} // (identifier, direction)
	for _, m := range ref.Metrics {
		dir := "read"
		if strings.Contains(m.MetricName, "_write.") {
			dir = "write"
		}
		w := want{bytes: 1}
		event, product, _ := strings.Cut(m.MetricExpr, " * ")
		if product != "" {
			for _, f := range strings.Split(product, " * ") {
				n, err := strconv.ParseFloat(f, 64)
				if err != nil {
					t.Fatalf("%s: %q", m.MetricName, m.MetricExpr)
				}
				w.bytes *= n
			}
			w.config = code[dir+"_cycles"]
		} else if strings.HasPrefix(event, `imx8_ddr0@axid\-`+dir+`\,axi_mask\=0xffff\,axi_id\=0x0000@`) {
			w.config = map[string]uint64{"read": 0x41, "write": 0x42}[dir] // the driver's axid-read and axid-write
			w.config1 = 0xffff << 16
		} else {
			t.Fatalf("%s: %q is neither a product of cycles nor the AXI filter's bytes", m.MetricName, m.MetricExpr)
		}
		wants[[2]string{m.Compat, dir}] = w
	}
	if len(wants) != 8 {
		t.Fatalf("%d formulas, want read and write of four parts", len(wants))
	}
	for _, part := range []string{"i.MX8MM", "i.MX8MN", "i.MX8MQ", "i.MX8MP"} {
		cs, err := Select(fixture.PMUs(t, fixture.IMX8MPlatform(part)), []int{0, 1, 2, 3}, "")
		if err != nil {
			t.Fatal(part, err)
		}
		n := 0
		for _, c := range cs {
			if c.Kind != MemoryBytes {
				continue
			}
			n++
			w := wants[[2]string{part, c.Name}]
			if c.PMU != "imx8_ddr0" || c.Attr.Config != w.config || c.Attr.Config1 != w.config1 || c.Scale != w.bytes || !reflect.DeepEqual(c.CPUs, []int{0}) {
				t.Errorf("%s %s: config %#x/%#x, %v bytes a count, CPUs %v; want %#x/%#x, %v, [0]", part, c.Name, c.Attr.Config, c.Attr.Config1, c.Scale, c.CPUs, w.config, w.config1, w.bytes)
			}
		}
		if n != 2 {
			t.Errorf("%s: %d memory counters, want read and write", part, n)
		}
	}
	if cs, err := Select(fixture.PMUs(t, fixture.IMX8MPlatform("i.MX8QXP")), []int{0, 1, 2, 3}, ""); err != nil || Has(cs, MemoryBytes) {
		t.Errorf("an unknown part: memory bytes %v (%v)", Has(cs, MemoryBytes), err)
	}
}
