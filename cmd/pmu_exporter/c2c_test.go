package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// c2cRecording is the False-Sharing benchmark as perf c2c records it,
// with loads hitting modified lines in L3 and stores hitting L1.
func c2cRecording(t *testing.T, f float64) (path string, loads, stores int) {
	c := perffile.C2C{F: f, Threads: 4, Iters: 100000, Period: 50, PID: 1000, Heap: 0x5555_0000_0000, Seed: 3,
		LoadSrc:  datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode(),
		StoreSrc: datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNA}.Encode()}
	b := c.File()
	path = filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, c.Loads, c.Stores
}

// TestC2C: the report finds the falsely shared line at the top, its
// mapping, each thread's own slot offset, the sample totals, and the false
// share of the sharing at f within sampling error.
func TestC2C(t *testing.T) {
	const f = 0.7
	path, loads, stores := c2cRecording(t, f)
	var out, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", path, "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("c2c exited %d: %s", code, errb.String())
	}
	var r cacheline.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Totals.Loads != uint64(loads) || r.Totals.Stores != uint64(stores) || r.Totals.LocalHITM != uint64(loads) {
		t.Errorf("totals %+v, recorded %d loads and %d stores", r.Totals, loads, stores)
	}
	n := float64(loads+stores) - 8 // each thread's first touches of each line are not yet sharing
	got := float64(r.Totals.FalseSharing) / float64(r.Totals.FalseSharing+r.Totals.TrueSharing)
	if tol := 3 * math.Sqrt(f*(1-f)/n); math.Abs(got-f) > tol+0.01 {
		t.Errorf("false share %.4f, want %.2f ± %.4f", got, f, tol)
	}
	if len(r.Lines) != 2 {
		t.Fatalf("%d lines, want the slots' line and the counter's", len(r.Lines))
	}
	top := r.Lines[0]
	if top.Address != "0x555500000100" || top.Symbol != "[heap]+0x100" || top.PID != 1000 || len(top.Threads) != 4 {
		t.Fatalf("top line %+v", top)
	}
	for _, th := range top.Threads {
		k := int(th.TID) - 1001
		want := fmt.Sprint(8 * k) // PEBS gives no access width: the offset alone
		if th.Written != want || th.Read != want || len(th.CPUs) != 1 || th.CPUs[0] != k {
			t.Errorf("thread %d: read %q written %q cpus %v, want its own bytes %s on cpu %d", th.TID, th.Read, th.Written, th.CPUs, want, k)
		}
	}
	if r.Lines[1].FalseSharing != 0 || r.Lines[1].TrueSharing == 0 {
		t.Errorf("shared counter line %+v", r.Lines[1])
	}
	// The code behind each line: on the slots' line the add's load and
	// store at each thread's offset, named in the benchmark's binary; on
	// the counter's line the other add, at offset 0.
	var codeSamples uint64
	for _, c := range top.Code {
		want := map[string]string{"load": fmt.Sprintf("0x%x", perffile.LoadIP), "store": fmt.Sprintf("0x%x", perffile.StoreIP)}[c.Op]
		if c.IP != want || c.Offset%8 != 0 || c.Symbol != fmt.Sprintf("/opt/fsbench/bench+0x%x", perffile.LoadIP-0x400000+map[string]int{"load": 0, "store": 4}[c.Op]) {
			t.Errorf("slots' line code %+v", c)
		}
		if (c.Op == "load") != (c.HITM == c.Samples) {
			t.Errorf("HITM samples of %+v", c)
		}
		codeSamples += c.Samples
	}
	if len(top.Code) != 8 || codeSamples != top.Loads+top.Stores {
		t.Errorf("%d code entries with %d samples, want 8 with the line's %d", len(top.Code), codeSamples, top.Loads+top.Stores)
	}
	if c := r.Lines[1].Code; len(c) != 2 || c[0].IP != fmt.Sprintf("0x%x", perffile.LoadIP+0x100) || c[0].Offset != 0 {
		t.Errorf("counter's line code %+v", c)
	}
	// The text report says the same.
	out.Reset()
	if code := run([]string{"c2c", "-i", path}, &out, &errb); code != 0 {
		t.Fatalf("c2c text exited %d", code)
	}
	if !strings.Contains(out.String(), "0x555500000100") || !strings.Contains(out.String(), "[heap]+0x100") ||
		!strings.Contains(out.String(), "/opt/fsbench/bench+0x1014") ||
		!strings.Contains(out.String(), fmt.Sprintf("%d loads, %d stores", loads, stores)) {
		t.Errorf("text report:\n%s", out.String())
	}
}

// A file without memory samples is refused with what to record instead.
func TestC2CWithoutMemorySamples(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", "../../formats/perfdata/testdata/page-faults.data"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "perf c2c record") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}

// randomLoadSources are n load data sources with every combination of
// level hit or miss, snoop, snoopx, remote and hops bits, one cache level
// each (perf counts a peer snoop once for each of L2 and L3 set).
func randomLoadSources(n int, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 3))
	levels := []uint16{0, datasrc.LvlL1, datasrc.LvlLFB, datasrc.LvlL2, datasrc.LvlL3, datasrc.LvlLocRAM, datasrc.LvlRemRAM1,
		datasrc.LvlRemRAM2, datasrc.LvlRemCCE1, datasrc.LvlRemCCE2, datasrc.LvlIO, datasrc.LvlUnc}
	out := make([]uint64, n)
	for i := range out {
		d := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: levels[r.IntN(len(levels))] | uint16(r.IntN(8)), Snoop: uint8(r.IntN(32)),
			SnoopX: uint8(r.IntN(4)), Remote: r.IntN(2) == 0, LvlNum: uint8(r.IntN(16))}
		if r.IntN(3) == 0 {
			d.Hops = uint8(r.IntN(5))
		}
		out[i] = d.Encode()
	}
	return out
}

// randomStoreSources are n store data sources with every combination of
// the mem_lvl bits that c2c counts stores by (hit, miss, NA, L1, and others).
func randomStoreSources(n int, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 3))
	out := make([]uint64, n)
	for i := range out {
		out[i] = datasrc.DataSrc{Op: datasrc.OpStore, Lvl: uint16(r.IntN(1 << 6)), Snoop: uint8(r.IntN(32))}.Encode()
	}
	return out
}

// perfC2C is what perf c2c report --stdio says of a recording with lines
// ranked by display (tot: HITM, peer: peer snoops): its Trace Event
// Information, and each listed line's address and local and remote counts
// of that kind, in perf's order, with the mean load latencies of the code
// behind it (Pareto rows by offset and instruction: remote and local loads
// of that kind, and the other loads).
type perfC2CLine struct {
	Address       string
	Local, Remote uint64
	Served        cacheline.Served // the table's columns by where loads and stores were served
	Cycles        map[perfC2CCode][3]float64
}

type perfC2CCode struct {
	Offset int
	IP     string
}

func perfC2C(t *testing.T, file, display string) (info map[string]uint64, lines []perfC2CLine) {
	t.Helper()
	perf := testenv.RequireTool(t, "perf")
	cmd := exec.Command(perf, "c2c", "report", "-i", file, "--stdio", "-d", display)
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("perf c2c report: %v\n%s", err, stderr.String())
	}
	info = map[string]uint64{}
	stat := regexp.MustCompile(`^  (\S.*?)\s+:\s+(\d+)$`)
	row := regexp.MustCompile(`^\s+\d+\s+(0x[0-9a-f]+)\s+\S+\s+\d+\s+[\d.]+%\s+(\d+)\s+(\d+)\s+(\d+)((?:\s+\d+){15})\s*$`)
	paretoLine := regexp.MustCompile(`^\s+\d+(?:\s+\d+){5}\s+(0x[0-9a-f]+)\s*$`)
	paretoRow := regexp.MustCompile(`^(?:\s+[\d.]+%){5}\s+(0x[0-9a-f]+)\s+\S+\s+\d+\s+(0x[0-9a-f]+)\s+(\d+)\s+(\d+)\s+(\d+)\s`)
	byAddress := map[string]int{}
	line := -1
	table := false
	for _, l := range strings.Split(string(out), "\n") {
		if m := paretoLine.FindStringSubmatch(l); m != nil && !table {
			i, ok := byAddress[m[1]]
			if !ok {
				t.Fatalf("perf c2c's Pareto names line %s, which its table did not list", m[1])
			}
			line = i
			continue
		}
		if m := paretoRow.FindStringSubmatch(l); m != nil && line >= 0 {
			off, _ := strconv.ParseUint(m[1], 0, 64)
			var c [3]float64
			for k := range c {
				c[k], _ = strconv.ParseFloat(m[3+k], 64)
			}
			lines[line].Cycles[perfC2CCode{int(off), m[2]}] = c
			continue
		}
		if m := stat.FindStringSubmatch(l); m != nil {
			n, _ := strconv.ParseUint(m[2], 10, 64)
			info[m[1]] = n
		}
		switch {
		case strings.Contains(l, "Shared Data Cache Line Table"):
			table = true
		case strings.Contains(l, "Shared Cache Line Distribution Pareto"):
			table = false
		}
		if m := row.FindStringSubmatch(l); table && m != nil {
			local, _ := strconv.ParseUint(m[3], 10, 64)
			remote, _ := strconv.ParseUint(m[4], 10, 64)
			// Total records, loads and stores, then the stores' L1 hits,
			// misses and N/A, and the loads' FB, L1, L2, LLC hit and
			// HITM, remote hit and HITM, local and remote DRAM.
			var n [15]uint64
			for k, f := range strings.Fields(m[5]) {
				n[k], _ = strconv.ParseUint(f, 10, 64)
			}
			served := cacheline.Served{LoadFB: n[6], LoadL1: n[7], LoadL2: n[8], LoadLLCHit: n[9], LoadLLCHITM: n[10],
				LoadRemoteHit: n[11], LoadRemoteHITM: n[12], LoadLocalDRAM: n[13], LoadRemoteDRAM: n[14],
				StoreL1Hit: n[3], StoreL1Miss: n[4], StoreNA: n[5]}
			byAddress[m[1]] = len(lines)
			lines = append(lines, perfC2CLine{m[1], local, remote, served, map[perfC2CCode][3]float64{}})
		}
	}
	if len(info) < 20 {
		t.Fatalf("perf c2c report printed no Trace Event Information:\n%s", out)
	}
	return info, lines
}

func ourC2C(t *testing.T, file string) cacheline.Report {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", file, "--format", "json", "--lines", "1000"}, &out, &errb); code != 0 {
		t.Fatalf("c2c exited %d: %s", code, errb.String())
	}
	var r cacheline.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Loads from another core's cache, counted as perf c2c counts them, over
// loads with every combination of data-source bits: local and remote HITM
// and peer snoops, in total and on each line.
func TestC2CContentionAsPerf(t *testing.T) {
	c := perffile.C2C{F: 0.5, Threads: 4, Iters: 20000, Period: 5, PID: 1000, Heap: 0x5555_0000_0000, Seed: 3,
		LoadSrcs: randomLoadSources(997, 1), StoreSrcs: randomStoreSources(991, 2)}
	file := filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(file, c.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	r := ourC2C(t, file)
	tot, hitmLines := perfC2C(t, file, "tot")
	_, peerLines := perfC2C(t, file, "peer")
	want := perfTotals(tot)
	got := r.Totals
	if got.Loads != want.Loads || got.Stores != want.Stores || got.LocalHITM != want.LocalHITM || got.RemoteHITM != want.RemoteHITM ||
		got.LocalPeer != want.LocalPeer || got.RemotePeer != want.RemotePeer || got.Served != want.Served {
		t.Errorf("totals %+v, perf c2c %+v", got, want)
	}
	if got.LocalHITM == 0 || got.RemoteHITM == 0 || got.LocalPeer == 0 || got.RemotePeer == 0 {
		t.Errorf("the loads make no HITM or peer of some kind: %+v", got)
	}
	if sv := got.Served; slices.Contains([]uint64{sv.LoadFB, sv.LoadL1, sv.LoadL2, sv.LoadLLCHit, sv.LoadLLCHITM, sv.LoadRemoteHit,
		sv.LoadRemoteHITM, sv.LoadLocalDRAM, sv.LoadRemoteDRAM, sv.StoreL1Hit, sv.StoreL1Miss, sv.StoreNA}, 0) {
		t.Errorf("the samples leave a count of perf c2c's table at 0: %+v", sv)
	}
	ours := map[string]cacheline.LineReport{}
	for _, l := range r.Lines {
		ours[l.Address] = l
	}
	if len(hitmLines) != 2 || len(peerLines) != 2 {
		t.Fatalf("perf c2c lists %d lines by HITM and %d by peer, want the benchmark's 2", len(hitmLines), len(peerLines))
	}
	loads := 0
	for _, p := range hitmLines {
		l := ours[p.Address]
		if l.LocalHITM != p.Local || l.RemoteHITM != p.Remote {
			t.Errorf("line %s: HITM %d local, %d remote; perf c2c: %d, %d", p.Address, l.LocalHITM, l.RemoteHITM, p.Local, p.Remote)
		}
		if l.Served != p.Served {
			t.Errorf("line %s: served %+v, perf c2c's table %+v", p.Address, l.Served, p.Served)
		}
		// Every load weighs 120 cycles: a class's mean is 120 where
		// it has loads, else 0, in perf's Pareto and in ours.
		for code, want := range p.Cycles {
			for _, c := range l.Code {
				if c.Op != "load" || c.IP != code.IP || c.Offset != code.Offset {
					continue
				}
				loads++
				if lc := c.LoadCycles; lc == nil || [3]float64{lc.RemoteHITM, lc.LocalHITM, lc.Other} != want {
					t.Errorf("line %s, %s at offset %d: mean cycles %+v, perf c2c %v (remote HITM, local HITM, other)", p.Address, code.IP, code.Offset, lc, want)
				}
			}
		}
	}
	if loads != 5 {
		t.Errorf("perf c2c's Pareto and ours share %d rows of loads, want 5: the 4 threads' adds to their slots and the one to the counter", loads)
	}
	for _, p := range peerLines {
		if l := ours[p.Address]; l.LocalPeer != p.Local || l.RemotePeer != p.Remote {
			t.Errorf("line %s: peer %d local, %d remote; perf c2c: %d, %d", p.Address, l.LocalPeer, l.RemotePeer, p.Local, p.Remote)
		}
	}
}

// perfTotals reads perf c2c's Trace Event Information as our totals.
func perfTotals(info map[string]uint64) cacheline.ReportTotals {
	return cacheline.ReportTotals{SampleCounts: cacheline.SampleCounts{Loads: info["Load Operations"], Stores: info["Store Operations"],
		LocalHITM: info["Load Local HITM"], RemoteHITM: info["Load Remote HITM"],
		LocalPeer: info["Load HIT Local Peer"], RemotePeer: info["Load HIT Remote Peer"],
		Served: cacheline.Served{LoadFB: info["Load Fill Buffer Hit"], LoadL1: info["Load L1D hit"], LoadL2: info["Load L2D hit"],
			// perf's "Load LLC hit" counts the LLC's HITMs too.
			LoadLLCHit: info["Load LLC hit"] - info["Load Local HITM"], LoadLLCHITM: info["Load Local HITM"], LoadRemoteHit: info["Load Remote HIT"],
			LoadRemoteHITM: info["Load Remote HITM"], LoadLocalDRAM: info["Load Local DRAM"], LoadRemoteDRAM: info["Load Remote DRAM"],
			StoreL1Hit: info["Store L1D Hit"], StoreL1Miss: info["Store L1D Miss"], StoreNA: info["Store No available memory level"]}}}
}

// c2c --display ranks and lists lines as perf c2c report -d does: by
// local, remote or all HITM loads, or peer snoops, only the lines with
// some. The counter of the False-Sharing benchmark is spread over 40 lines
// here, and loads come from local and remote HITMs, peers and L1.
func TestC2CDisplayAsPerf(t *testing.T) {
	const lh = datasrc.LvlHit
	srcs := []uint64{
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: lh | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode(),
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: lh | datasrc.LvlRemCCE1, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM, Remote: true}.Encode(),
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: lh | datasrc.LvlL2, LvlNum: datasrc.LvlNumL2, SnoopX: datasrc.SnoopXPeer}.Encode(),
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: lh | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNone}.Encode(),
	}
	r := rand.New(rand.NewPCG(5, 5))
	var loads []uint64
	for range 1009 {
		loads = append(loads, srcs[r.IntN(len(srcs))])
	}
	c := perffile.C2C{F: 0.2, Threads: 4, Iters: 40000, Period: 5, PID: 1000, Heap: 0x5555_0000_0000, Seed: 11, LoadSrcs: loads, CounterLines: 40,
		StoreSrc: datasrc.DataSrc{Op: datasrc.OpStore, Lvl: lh | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNA}.Encode()}
	file := filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(file, c.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"tot", "lcl", "rmt", "peer"} {
		_, want := perfC2C(t, file, d)
		var out, errb bytes.Buffer
		if code := run([]string{"c2c", "-i", file, "--format", "json", "--lines", "1000", "-d", d}, &out, &errb); code != 0 {
			t.Fatalf("c2c -d %s exited %d: %s", d, code, errb.String())
		}
		var got cacheline.Report
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		count := func(l cacheline.LineReport) uint64 {
			return map[string]uint64{"tot": l.LocalHITM + l.RemoteHITM, "lcl": l.LocalHITM, "rmt": l.RemoteHITM, "peer": l.LocalPeer + l.RemotePeer}[d]
		}
		if len(want) < 30 || len(got.Lines) != len(want) {
			t.Errorf("-d %s: %d lines, perf c2c lists %d", d, len(got.Lines), len(want))
			continue
		}
		for i, p := range want {
			// perf orders lines with equal counts as it pleases.
			if n := count(got.Lines[i]); n != p.Local+p.Remote && d != "lcl" && d != "rmt" ||
				d == "lcl" && n != p.Local || d == "rmt" && n != p.Remote {
				t.Errorf("-d %s: line %d is %s with %d, perf c2c's %s with %d local and %d remote", d, i, got.Lines[i].Address, n, p.Address, p.Local, p.Remote)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", file, "-d", "bogus"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "bogus") {
		t.Errorf("-d bogus: exit %d, %s", code, errb.String())
	}
}
