package spe

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// liveTraces draws what two CPUs' SPE units and schedulers do: each CPU
// runs threads of one process in turn (a switch between records), and
// writes its records in chunks (its first record before any switch), each chunk after the switches made while
// it filled; with context packets naming the running thread, or without
// (a kernel without CONFIG_PID_IN_CONTEXTIDR). Loads and stores of every
// data source, and branches, which make no sample.
func liveTraces(seed uint64, context bool) perffile.SPE {
	r := rand.New(rand.NewPCG(seed, 3))
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: 4242, Comm: "live", Threads: []uint32{4242, 4243, 4244, 4245},
		CPUs: 2, Shift: 4, Mult: 625, Zero: 1e9, RoundEvery: 2}
	perfTime := func(count uint64) uint64 { return s.Zero + count*uint64(s.Mult)>>s.Shift }
	sources := []uint8{0x0, 0x8, 0x9, 0xa, 0xb, 0xc, 0xd, 0xe}
	count := [2]uint64{1001, 1000} // each CPU's counts keep their parity: no two records at one time
	running := [2]uint32{}         // 0: none seen yet
	for range 60 {
		for cpu := range 2 {
			var ops []perffile.SPEOp
			var sw []perffile.SPESwitch
			for range 1 + r.IntN(8) {
				if (r.IntN(3) == 0 || running[cpu] == 0) && count[cpu] > 1001 {
					// A switch between two records (counts 4 or more apart).
					running[cpu] = s.Threads[r.IntN(len(s.Threads))]
					sw = append(sw, perffile.SPESwitch{CPU: uint32(cpu), PID: s.PID, TID: running[cpu], Time: perfTime(count[cpu] + 2)})
				}
				count[cpu] += 4 * (1 + uint64(r.IntN(20)))
				o := perffile.SPEOp{PC: 0x400000 + uint64(r.IntN(0x400))*4, Virtual: 0x5555_0000_0000 + uint64(r.IntN(1<<16))*8,
					Store: r.IntN(3) == 0, Branch: r.IntN(6) == 0, Total: uint16(r.IntN(300)), Source: sources[r.IntN(len(sources))], Timestamp: count[cpu]}
				if context && running[cpu] != 0 {
					o.Context = running[cpu]
				}
				ops = append(ops, o)
			}
			s.Traces = append(s.Traces, perffile.SPETrace{CPU: uint32(cpu), Data: perffile.SPEPackets(ops...), Switches: sw})
		}
	}
	return s
}

// streamed feeds the traces to one Stream per CPU as the live reader
// does: each CPU's switches, then the chunk its AUX record announces.
func streamed(s perffile.SPE) ([]perfrecord.Sample, [2]*Stream) {
	var streams [2]*Stream
	for cpu := range streams {
		streams[cpu] = &Stream{CPU: uint32(cpu), MIDR: s.MIDR, TC: perfdata.TimeConv{Shift: uint64(s.Shift), Mult: uint64(s.Mult), Zero: s.Zero}}
	}
	var out []perfrecord.Sample
	for _, t := range s.Traces {
		st := streams[t.CPU]
		for _, w := range t.Switches {
			st.Switch(w.Time, w.PID, w.TID)
		}
		st.Chunk(t.Data, func(smp *perfrecord.Sample) { out = append(out, *smp) })
	}
	return out, streams
}

// fields are what a memory sample says.
type fields struct {
	Misc                                          uint16
	PID, TID, CPU                                 uint32
	IP, Time, Addr, Period, Weight, Src, Physical uint64
}

func fieldsOf(s perfrecord.Sample) fields {
	return fields{s.Misc, s.PID, s.TID, s.CPU, s.IP, s.Time, s.Addr, s.Period, s.Weight, s.DataSrc, s.PhysAddr}
}

func byTime(a, b perfrecord.Sample) int {
	return cmp.Or(cmp.Compare(a.Time, b.Time), cmp.Compare(a.CPU, b.CPU))
}

// TestStreamAsPerfData: the live reader's samples are the ones the same
// records make read from a perf.data file (PerfData, which makes what
// perf script --itrace=M makes: TestSamplesOfArmSPE), with and without
// context packets: the same threads and processes, times, addresses,
// data sources, weights and PCs.
func TestStreamAsPerfData(t *testing.T) {
	for _, context := range []bool{true, false} {
		s := liveTraces(7, context)
		want, _, err := samplesOf(t, s.File())
		if err != nil {
			t.Fatal(err)
		}
		got, streams := streamed(s)
		slices.SortFunc(want, byTime)
		slices.SortFunc(got, byTime)
		if len(got) != len(want) || len(want) < 200 {
			t.Fatalf("context %v: %d samples live, %d from the file", context, len(got), len(want))
		}
		unknown := 0
		for i := range want {
			w, g := fieldsOf(want[i]), fieldsOf(got[i])
			if g != w {
				t.Fatalf("context %v, sample %d:\n live %+v\n file %+v", context, i, g, w)
			}
			if got[i].TID == Unknown {
				unknown++
			}
		}
		if unknown == 0 || unknown > len(got)/10 {
			t.Errorf("context %v: %d of %d samples without a known thread; want a few (before each CPU's first switch)", context, unknown, len(got))
		}
		if streams[0].Other == 0 || streams[0].Bad+streams[0].Cut+streams[1].Bad+streams[1].Cut != 0 {
			t.Errorf("CPU 0: %d other records, %d bad and %d cut chunks", streams[0].Other, streams[0].Bad, streams[0].Cut)
		}
		// Only the switches after the last record are held.
		if n := len(streams[0].tasks); n > 3 {
			t.Errorf("%d switches held after the last chunk", n)
		}
	}
}

// A record older than every switch held, after the oldest were forgotten,
// gets the oldest's task; a context packet naming a thread not running at
// its time gets that thread's process from an earlier switch.
func TestStreamForgetsOldSwitches(t *testing.T) {
	st := &Stream{TC: perfdata.TimeConv{Mult: 1}}
	for i := range maxTasks + 10 {
		st.Switch(uint64(100+i), 7, uint32(1000+i%50))
	}
	if st.Forgot != 10 || len(st.tasks) != maxTasks {
		t.Fatalf("forgot %d, hold %d", st.Forgot, len(st.tasks))
	}
	var got []perfrecord.Sample
	st.Chunk(perffile.SPEPackets(perffile.SPEOp{PC: 4, Virtual: 8, Timestamp: 50}, perffile.SPEOp{PC: 4, Virtual: 8, Timestamp: 105, Context: 1003}),
		func(s *perfrecord.Sample) { got = append(got, *s) })
	if len(got) != 2 || got[0].TID != 1000+10 || got[0].PID != 7 || got[1].TID != 1003 || got[1].PID != 7 {
		t.Fatalf("samples %+v", got)
	}
}

// Live chunks and switches never panic, whatever the AUX area holds; the
// switches held stay bounded.
func FuzzStream(f *testing.F) {
	s := liveTraces(1, true)
	f.Add(s.Traces[0].Data, uint64(5), uint32(7))
	f.Add(append(s.Traces[1].Data, 0x49, 0xff, 0x00), uint64(1<<62), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, at uint64, tid uint32) {
		st := &Stream{MIDR: s.MIDR, TC: perfdata.TimeConv{Mult: 3, Shift: 1}}
		st.Switch(at, 1, tid)
		st.Chunk(data, func(*perfrecord.Sample) {})
		st.Switch(at+1, 1, tid+1)
		st.Chunk(data, func(*perfrecord.Sample) {})
		if len(st.tasks) > 2 {
			t.Fatalf("%d switches held", len(st.tasks))
		}
	})
}

// benchChunk is one CPU's chunk of 1,024 load and store records of the
// common encoding, with context packets: what a Neoverse writes.
func benchChunk() []byte {
	r := rand.New(rand.NewPCG(1, 1))
	var ops []perffile.SPEOp
	for i := range 1024 {
		ops = append(ops, perffile.SPEOp{PC: 0x400000 + uint64(r.IntN(0x400))*4, Virtual: 0x5555_0000_0000 + uint64(r.IntN(1<<16))*8,
			Store: r.IntN(3) == 0, Total: uint16(r.IntN(300)), Source: SourceL2, Context: 4242, Timestamp: uint64(1000 + 4*i)})
	}
	return perffile.SPEPackets(ops...)
}

// BenchmarkStreamChunk is the live reader's decoding of SPE records into
// samples, per record (the stats and the decoder not included).
func BenchmarkStreamChunk(b *testing.B) {
	data := benchChunk()
	st := &Stream{MIDR: 0x410fd0c1, TC: perfdata.TimeConv{Mult: 625, Shift: 4}}
	st.Switch(0, 4242, 4242)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		st.Chunk(data, func(*perfrecord.Sample) { n++ })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
}

// BenchmarkPerfDataChunk is the same records read from a perf.data file's
// AUXTRACE record (PerfData.Decode, which also lays each sample out as a
// record for the file's time-ordered stream), per record.
func BenchmarkPerfDataChunk(b *testing.B) {
	data := benchChunk()
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: 4242, Comm: "bench", Threads: []uint32{4242}, CPUs: 1, Mult: 625, Shift: 4,
		Traces: []perffile.SPETrace{{CPU: 0, Data: data}}}
	file, err := perfdata.Open(bytes.NewReader(s.File()))
	if err != nil {
		b.Fatal(err)
	}
	var p *PerfData
	var aux []byte
	for {
		rec, err := file.Next()
		if err != nil {
			break
		}
		h, _ := perfrecord.ParseHeader(rec)
		switch h.Type {
		case perfdata.TypeAuxtraceInfo:
			if p, err = NewPerfData(file); err != nil {
				b.Fatal(err)
			}
		case perfdata.TypeAuxtrace:
			aux = append([]byte(nil), rec...)
		}
	}
	if p == nil || aux == nil {
		b.Fatal("no SPE data in the recording")
	}
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		p.Decode(aux, func(uint64, []byte) { n++ })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
}
