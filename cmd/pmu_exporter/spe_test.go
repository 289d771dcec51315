package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"

	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// speRecording writes an Arm SPE recording of one process's threads on two
// CPUs, their AUX data in chunks of a few records taken from each CPU in
// turn, a round at a time (as perf record drains the buffers, each round
// what the CPUs wrote since the last): loads and stores from every
// data source of the common encoding and an unknown one, with TLB and
// cache events, kernel PCs among them, and conditional branches, which
// make no memory sample.
func speRecording(t *testing.T, midr uint64) string {
	t.Helper()
	return speRecordingOf(t, midr, midr, nil, false)
}

// speRecordingOf is speRecording with the records drawn from seed, with
// midrs (one per CPU) in AUXTRACE_INFO's version 2 where given, and with
// switched, no context packets but context switches: one before each
// CPU's first record, and one after the first record of each chunk.
func speRecordingOf(t *testing.T, seed, midr uint64, midrs []uint64, switched bool) string {
	t.Helper()
	perfTime := func(count uint64) uint64 { return 1e9 + count*625>>4 } // TIME_CONV below
	var switches [2][][]perffile.SPESwitch
	r := rand.New(rand.NewPCG(seed, 7))
	threads := []uint32{4242, 4243, 4244}
	sources := []uint8{0x0, 0x8, 0x9, 0xa, 0xb, 0xc, 0xd, 0xe, 0x3}
	events := []uint64{1 << 2, 1 << 3, 1 << 4, 1 << 5, 1 << 8, 1 << 9, 1 << 10}
	var chunks [2][][]byte
	for round := range 40 {
		for cpu := range 2 {
			// Each round drains what both CPUs wrote in the same span
			// of time; each CPU's counts have their own parity: no two
			// samples at one time, whose order perf leaves open.
			ts := uint64(1000 + 1000*round + cpu)
			var ops []perffile.SPEOp
			for range 1 + r.IntN(4) {
				ts += 4 * (1 + uint64(r.IntN(50)))
				o := perffile.SPEOp{PC: 0x400000 + uint64(r.IntN(0x1000))*4, Virtual: 0x5555_0000_0000 + uint64(r.IntN(1<<20))*8,
					Store: r.IntN(3) == 0, Branch: r.IntN(8) == 0, Total: uint16(r.IntN(400)), Issue: uint16(r.IntN(40)),
					Source: sources[r.IntN(len(sources))], Context: threads[r.IntN(len(threads))], Timestamp: ts}
				for _, e := range events {
					if r.IntN(3) == 0 {
						o.Events |= e
					}
				}
				if r.IntN(2) == 0 {
					o.Physical = 0x8_0000_0000 + o.Virtual&0xfffffff
				}
				if r.IntN(10) == 0 {
					o.EL, o.PC = 1, 0xffff_8000_1000_0000+uint64(r.IntN(0x1000))*4
				}
				ops = append(ops, o)
			}
			var sw []perffile.SPESwitch
			if switched {
				next := func(count uint64) perffile.SPESwitch {
					tid := threads[r.IntN(len(threads))]
					return perffile.SPESwitch{CPU: uint32(cpu), PID: 4242, TID: tid, Time: perfTime(count)}
				}
				// Two counts from a record: perf converts the switch's
				// time back to a count, rounding down, and takes a
				// record at that count as after it.
				if round == 0 {
					sw = append(sw, next(ops[0].Timestamp-2))
				}
				// Between the chunk's first record and the next
				// (their counts differ by 4 or more).
				sw = append(sw, next(ops[0].Timestamp+2))
				for i := range ops {
					ops[i].Context = 0
				}
			}
			switches[cpu] = append(switches[cpu], sw)
			chunks[cpu] = append(chunks[cpu], perffile.SPEPackets(ops...))
		}
	}
	s := perffile.SPE{PMUType: 9, MIDR: midr, PID: 4242, Comm: "fsbench", Threads: threads, CPUs: 2, Shift: 4, Mult: 625, Zero: 1e9, RoundEvery: 2, MIDRs: midrs}
	for i := range chunks[0] {
		for cpu := range 2 {
			s.Traces = append(s.Traces, perffile.SPETrace{CPU: uint32(cpu), Data: chunks[cpu][i], Switches: switches[cpu][i]})
		}
	}
	file := filepath.Join(t.TempDir(), "spe.data")
	if err := os.WriteFile(file, s.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestSamplesOfArmSPE: on Arm SPE recordings of a Neoverse N1 (whose data
// sources use the common encoding) and a Cortex-A72 (whose do not), and one
// whose threads only the context switches say (a kernel without
// CONFIG_PID_IN_CONTEXTIDR), samples
// prints the samples perf script makes of the AUX data (--itrace=M, its
// "memory" event): the same threads, CPUs, times (through TIME_CONV), data
// and physical addresses, data sources, weights and PCs, in the same order.
func TestSamplesOfArmSPE(t *testing.T) {
	testenv.RequireTool(t, "perf")
	for name, c := range map[string]struct {
		midr     uint64
		switched bool
	}{"neoverse-n1": {0x410fd0c1, false}, "cortex-a72": {0x410fd083, false}, "threads-by-switches": {0x410fd0c1, true}} {
		t.Run(name, func(t *testing.T) {
			file := speRecordingOf(t, c.midr, c.midr, nil, c.switched)
			want := perfScriptOf(t, file, "--itrace=M", "-F", "hw:"+perfScriptFields)
			got := ourSamples(t, file)
			if len(want) < 100 {
				t.Fatalf("perf script made %d samples of the recording", len(want))
			}
			sameSamples(t, got, want)
		})
	}
}

// Recorded by a perf that lists each CPU's MIDR (metadata version 2, which
// perf 6.1 cannot read), on a machine whose CPU 0 is a Neoverse N1 and CPU
// 1 a Cortex-A72: each CPU's samples are what the version 1 recordings of
// the same records give for its core, checked against perf above.
func TestSamplesOfArmSPEPerCPUMIDR(t *testing.T) {
	const n1, a72 = 0x410fd0c1, 0x410fd083
	mixed := ourSamples(t, speRecordingOf(t, 1, 0, []uint64{n1, a72}, false))
	allN1, allA72 := ourSamples(t, speRecordingOf(t, 1, n1, nil, false)), ourSamples(t, speRecordingOf(t, 1, a72, nil, false))
	if len(mixed) != len(allN1) || len(mixed) != len(allA72) || len(mixed) < 100 {
		t.Fatalf("%d samples; %d and %d with one core type", len(mixed), len(allN1), len(allA72))
	}
	differ := 0
	for i, line := range mixed {
		want := allN1[i]
		if strings.Fields(line)[2] == "1" {
			want = allA72[i]
		}
		if line != want {
			t.Fatalf("sample %d:\n got  %s\n want %s", i, line, want)
		}
		if allN1[i] != allA72[i] {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the two cores' data sources never differ: the test cannot tell them apart")
	}
}

// speFalseSharing is the thesis' False-Sharing benchmark as an SPE unit
// would sample it on two Neoverse N1 CPUs: four threads (two on each CPU)
// add atomically (one load-store operation, which SPE records as a store)
// to their own 8-byte slot of one line with probability f, else to a
// counter on the next line; one operation in period is sampled.
func speFalseSharing(t *testing.T, f float64, period int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(42, 1))
	const line, shared = 0x5555_0000_0100, 0x5555_0000_0140
	threads := []uint32{4242, 4243, 4244, 4245, 4246}
	var ops [2][]perffile.SPEOp
	var chunks [][]perffile.SPEOp
	ts := uint64(1000)
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: 4242, Comm: "fsbench", Threads: threads, CPUs: 2, Mult: 1, Zero: 1e9, RoundEvery: 2}
	for i := range 400000 {
		tid := threads[1+r.IntN(4)]
		cpu := tid % 2
		addr, pc := uint64(shared), uint64(0x401110)
		if r.Float64() < f {
			addr, pc = line+8*uint64(tid-4243), 0x401010
		}
		ts += 2
		if r.IntN(period) == 0 {
			ops[cpu] = append(ops[cpu], perffile.SPEOp{PC: pc, Virtual: addr, Store: true, Total: 80, Source: 0x9, Context: tid, Timestamp: ts + uint64(cpu)})
		}
		if (i+1)%20000 == 0 { // a round: each CPU's buffer drained
			chunks = append(chunks, ops[0], ops[1])
			ops = [2][]perffile.SPEOp{}
		}
	}
	for i, c := range chunks {
		s.Traces = append(s.Traces, perffile.SPETrace{CPU: uint32(i % 2), Data: perffile.SPEPackets(c...)})
	}
	file := filepath.Join(t.TempDir(), "fs.data")
	if err := os.WriteFile(file, s.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// `comm` on SPE samples of the False-Sharing benchmark finds its share of
// accesses to own slots, as on PEBS samples (TestCommOnPreciseRecording),
// between the four threads, and names the sampler's window.
func TestCommOnSPERecording(t *testing.T) {
	for _, f := range []float64{0.25, 0.75} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"comm", "--format", "json", speFalseSharing(t, f, 50)}, &stdout, &stderr); code != 0 {
			t.Fatalf("comm: exit %d\n%s", code, stderr.String())
		}
		var r comdetect.ReportJSON
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || len(r.Processes) != 1 {
			t.Fatalf("%v: %s", err, stdout.String())
		}
		p := r.Processes[0]
		t.Logf("f = %.2f: %+v", f, p.Detections)
		if got := fsFraction(p); math.Abs(got-f) > 0.05 {
			t.Errorf("f = %.2f: false-sharing fraction %.3f (%+v)", f, got, p.Detections)
		}
		if want := []uint32{4243, 4244, 4245, 4246}; !slices.Equal(p.Threads, want) {
			t.Errorf("threads %v, want %v", p.Threads, want)
		}
	}
}

// The kernel's AUX records say when the AUX area was full (truncated), the
// data had gaps (partial) or collided: samples warns of each as often, out
// of as many AUX records, as perf script does.
func TestSamplesWarnOfAUXLoss(t *testing.T) {
	testenv.RequireTool(t, "perf")
	op := perffile.SPEPackets(perffile.SPEOp{PC: 0x400000, Virtual: 0x1000, Source: 0xe, Context: 4242, Timestamp: 5})
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: 4242, Comm: "x", Threads: []uint32{4242}, CPUs: 2, Mult: 1, Zero: 1000,
		Traces: []perffile.SPETrace{{CPU: 0, Data: op, AuxFlags: 1}, {CPU: 1, Data: op, AuxFlags: 4}, {CPU: 0, Data: op, AuxFlags: 1 | 8}, {CPU: 1, Data: op}, {CPU: 0, Data: op}}}
	file := filepath.Join(t.TempDir(), "aux.data")
	if err := os.WriteFile(file, s.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	counts := func(out string) map[string]string {
		m := map[string]string{}
		for _, what := range []string{"lost", "had gaps in it", "detected collision"} {
			re := regexp.MustCompile(`AUX data ` + what + ` +(\d+ times out of \d+)`)
			if g := re.FindStringSubmatch(out); g != nil {
				m[what] = g[1]
			}
		}
		return m
	}
	cmd := exec.Command("perf", "script", "-i", file, "--itrace=M")
	var perfErr bytes.Buffer
	cmd.Stderr = &perfErr
	if err := cmd.Run(); err != nil {
		t.Fatalf("perf script: %v\n%s", err, perfErr.String())
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"samples", "--input", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("samples exited %d: %s", code, stderr.String())
	}
	want, got := counts(perfErr.String()), counts(stderr.String())
	if len(want) != 3 || !maps.Equal(got, want) {
		t.Errorf("samples warned %v, perf script %v\n%s", got, want, stderr.String())
	}
}

// speContended is an SPE recording of a Neoverse N1's four threads, two on
// each of two CPUs, loading from and storing to four 8-byte slots of 48
// lines, line k chosen with weight 1/(k+1) by code of its own, each load
// served from one of the common encoding's data sources (peer core, local
// and peer cluster and remote among them) in 20 to 419 cycles.
func speContended(t *testing.T) string {
	t.Helper()
	r := rand.New(rand.NewPCG(9, 9))
	threads := []uint32{4242, 4243, 4244, 4245, 4246}
	sources := []uint8{0x0, 0x8, 0x9, 0xa, 0xb, 0xc, 0xd, 0xe}
	weights := make([]float64, 48)
	sum := 0.0
	for k := range weights {
		weights[k] = 1 / float64(k+1)
		sum += weights[k]
	}
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: 4242, Comm: "contend", Threads: threads, CPUs: 2, Mult: 1, Zero: 1e9, RoundEvery: 2}
	ts := uint64(1000)
	for range 20 { // rounds
		var ops [2][]perffile.SPEOp
		for range 200 {
			tid := threads[1+r.IntN(4)]
			cpu := tid % 2
			x, k := r.Float64()*sum, 0
			for ; k < len(weights)-1 && x > weights[k]; k++ {
				x -= weights[k]
			}
			ts += 2
			o := perffile.SPEOp{PC: 0x401000 + 4*uint64(k), Virtual: 0x5555_0001_0000 + 64*uint64(k) + 16*uint64(r.IntN(4)),
				Store: r.IntN(4) == 0, Total: uint16(20 + r.IntN(400)), Source: sources[r.IntN(len(sources))], Context: tid, Timestamp: ts + uint64(cpu)}
			ops[cpu] = append(ops[cpu], o)
		}
		for cpu := range 2 {
			s.Traces = append(s.Traces, perffile.SPETrace{CPU: uint32(cpu), Data: perffile.SPEPackets(ops[cpu]...)})
		}
	}
	file := filepath.Join(t.TempDir(), "contend.data")
	if err := os.WriteFile(file, s.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// On Arm, whose data sources know no HITM, c2c ranks lines by the loads
// that a peer core's or cluster's cache served, as perf c2c report -d
// peer does: the same lines, with the same local and remote peer loads, in
// the same order, and the same totals.
func TestC2COfArmSPE(t *testing.T) {
	file := speContended(t)
	info, lines := perfC2C(t, file, "peer")
	r := ourC2C(t, file)
	want := perfTotals(info)
	if g := r.Totals; g.Loads != want.Loads || g.Stores != want.Stores || g.LocalPeer != want.LocalPeer || g.RemotePeer != want.RemotePeer ||
		g.LocalHITM != 0 || g.RemoteHITM != 0 {
		t.Errorf("totals %+v, perf c2c %+v", g, want)
	}
	var contended []cacheline.LineReport
	for _, l := range r.Lines {
		if l.LocalPeer+l.RemotePeer > 0 {
			contended = append(contended, l)
		}
	}
	if len(lines) < 40 || len(contended) != len(lines) {
		t.Fatalf("%d lines with peer loads, perf c2c lists %d", len(contended), len(lines))
	}
	for i, p := range lines {
		l := contended[i]
		// perf orders lines with as many peer loads as it pleases.
		if l.LocalPeer+l.RemotePeer != p.Local+p.Remote {
			t.Errorf("line %d: %s with %d peer loads, perf c2c: %s with %d", i, l.Address, l.LocalPeer+l.RemotePeer, p.Address, p.Local+p.Remote)
		}
	}
	var text, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", file}, &text, &errb); code != 0 ||
		!strings.Contains(text.String(), fmt.Sprintf("peer snoops: %d local, %d remote", want.LocalPeer, want.RemotePeer)) {
		t.Errorf("c2c text exited %d:\n%s", code, text.String())
	}
	ours := map[string]cacheline.LineReport{}
	for _, l := range contended {
		ours[l.Address] = l
	}
	rows := 0
	for _, p := range lines {
		l, ok := ours[p.Address]
		if !ok || l.LocalPeer != p.Local || l.RemotePeer != p.Remote {
			t.Errorf("line %s: peer loads %d local, %d remote; perf c2c: %d, %d", p.Address, l.LocalPeer, l.RemotePeer, p.Local, p.Remote)
		}
		if l.Served != p.Served {
			t.Errorf("line %s: served %+v, perf c2c's table %+v", p.Address, l.Served, p.Served)
		}
		// The mean latency of the loads behind each offset, by where
		// they were served, as perf's Pareto rows give it (rounded).
		for code, want := range p.Cycles {
			var got [3]float64
			for _, c := range l.Code {
				if c.Op == "load" && c.IP == code.IP && c.Offset == code.Offset && c.LoadCycles != nil {
					got = [3]float64{c.LoadCycles.RemotePeer, c.LoadCycles.LocalPeer, c.LoadCycles.Other}
				}
			}
			for k := range got {
				if math.Abs(got[k]-want[k]) > 0.5 {
					t.Errorf("line %s, %s at offset %d: mean cycles of remote peer, local peer and other loads %.1f, perf c2c %v",
						p.Address, code.IP, code.Offset, got, want)
					break
				}
			}
			rows++
		}
	}
	if rows < len(lines) {
		t.Errorf("perf c2c's Pareto gave %d rows of code for %d lines", rows, len(lines))
	}
}

// The Arm example recording (examples/replay/n1-spe.data, the
// False-Sharing benchmark with 70% of the adds on own slots): c2c ranks
// the slots' line first by its peer loads, each thread on its own slot,
// named in the heap and the benchmark's binary, and the false share of the
// sharing near 0.7.
func TestC2COfSPEExample(t *testing.T) {
	c := perffile.SPEC2C{F: 0.7, Threads: 4, Iters: 20000, Period: 50, PID: 4242, Seed: 1}
	c.File()
	r := ourC2C(t, "../../examples/replay/n1-spe.data")
	if r.Totals.Loads != uint64(c.Loads) || r.Totals.Stores != uint64(c.Stores) || r.Totals.LocalPeer != uint64(c.PeerCore+c.PeerClustr) ||
		r.Totals.RemotePeer != 0 || r.Totals.LocalHITM+r.Totals.RemoteHITM != 0 {
		t.Errorf("totals %+v; the recording has %d loads (%d from peers) and %d stores", r.Totals, c.Loads, c.PeerCore+c.PeerClustr, c.Stores)
	}
	if len(r.Lines) != 2 {
		t.Fatalf("%d lines, want the slots' and the counter's", len(r.Lines))
	}
	top := r.Lines[0]
	if top.Address != fmt.Sprintf("%#x", c.SlotLine) || top.Symbol != "[heap]+0x100" || len(top.Threads) != 4 {
		t.Fatalf("top line %+v", top)
	}
	for _, th := range top.Threads {
		k := int(th.TID) - 4243
		if want := fmt.Sprint(8 * k); th.Written != want || th.Read != want || len(th.CPUs) != 1 || th.CPUs[0] != k {
			t.Errorf("thread %d: read %q written %q on %v, want its own byte %s on CPU %d", th.TID, th.Read, th.Written, th.CPUs, want, k)
		}
	}
	for _, code := range top.Code {
		if !strings.HasPrefix(code.Symbol, "/opt/fsbench/bench+0x101") {
			t.Errorf("code %+v, want the slot's add in the benchmark", code)
		}
	}
	fs := float64(r.Totals.FalseSharing) / float64(r.Totals.FalseSharing+r.Totals.TrueSharing)
	if math.Abs(fs-0.7) > 0.1 {
		t.Errorf("false share %.3f, want about 0.7", fs)
	}
}
