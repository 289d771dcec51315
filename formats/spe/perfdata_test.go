package spe

import (
	"bytes"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// samplesOf reads a recording as the exporter's commands do, returning the
// memory event's samples.
func samplesOf(t testing.TB, b []byte) ([]perfrecord.Sample, *PerfData, error) {
	file, err := perfdata.Open(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var p *PerfData
	var out []perfrecord.Sample
	var s perfrecord.Sample
	err = file.OrderedAux(func(rec []byte, emit func(uint64, []byte)) error {
		if p == nil {
			return nil
		}
		return p.Decode(rec, emit)
	}, func(rec []byte) error {
		h, _ := perfrecord.ParseHeader(rec)
		switch {
		case h.Type == perfdata.TypeAuxtraceInfo && p == nil:
			var err error
			p, err = NewPerfData(file)
			return err
		case h.Type != perfrecord.TypeSample:
			if p != nil {
				p.Record(rec, h)
			}
			return nil
		}
		i, err := file.Events.ForSample(rec)
		if err != nil || p == nil || i != p.Event {
			return err
		}
		if err := perfrecord.DecodeSample(rec, &file.Events.Layouts[i], &s); err != nil {
			return err
		}
		p.Fill(&s)
		out = append(out, s)
		return nil
	})
	return out, p, err
}

func recording(midrs []uint64, traces ...perffile.SPETrace) []byte {
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, MIDRs: midrs, PID: 1, Comm: "x", Threads: []uint32{1, 2}, CPUs: 2, Mult: 1, RoundEvery: 1, Traces: traces}
	return s.File()
}

// A record cut off at the end of its chunk (data lost while recording) is
// dropped and counted, as perf drops it; the records around it are read,
// with their threads' PIDs from the COMM records.
func TestChunkEndingInsideARecord(t *testing.T) {
	load := perffile.SPEPackets(perffile.SPEOp{PC: 0x400000, Virtual: 0x1000, Source: SourceL2, Context: 2, Timestamp: 5})
	store := perffile.SPEPackets(perffile.SPEOp{PC: 0x400004, Virtual: 0x1008, Store: true, Context: 1, Timestamp: 9})
	got, p, err := samplesOf(t, recording(nil, perffile.SPETrace{CPU: 0, Data: append(load, store[:10]...)}, perffile.SPETrace{CPU: 0, Data: store}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Addr != 0x1000 || got[0].TID != 2 || got[0].PID != 1 || got[1].Addr != 0x1008 || got[1].Time != 9 {
		t.Fatalf("samples %+v", got)
	}
	if p.Cut != 1 || p.Bad != 0 {
		t.Errorf("cut %d, bad %d: want the cut record counted", p.Cut, p.Bad)
	}
}

// Metadata that is neither version 1 nor a version 2 header, or whose CPUs
// do not divide it, is an error naming it.
func TestBadMetadata(t *testing.T) {
	for _, priv := range [][]uint64{{9}, {2, 4, 9}, {2, 4, 9, 3, 1, 2, 3, 4, 5, 6}, {2, 9, 9, 1}} {
		if _, _, err := metadata(priv); err == nil {
			t.Errorf("metadata %v: no error", priv)
		}
	}
	if pmu, midrs, err := metadata([]uint64{2, 4, 9, 2, 0x10, 0, 3, 0xa, 9, 1, 0x10, 1, 3, 0xb, 9, 1}); err != nil || pmu != 9 || midrs[0] != 0xa || midrs[1] != 0xb {
		t.Errorf("version 2: PMU %d, MIDRs %v, %v", pmu, midrs, err)
	}
}

// Reading a recording never panics, whatever its AUXTRACE_INFO, TIME_CONV
// and AUX data say.
func FuzzPerfData(f *testing.F) {
	a := perffile.SPETrace{CPU: 0, Data: perffile.SPEPackets(perffile.SPEOp{PC: 0x400000, Virtual: 0x1000, Source: 0xe, Context: 2, Timestamp: 5})}
	b := perffile.SPETrace{CPU: 1, Data: perffile.SPEPackets(perffile.SPEOp{PC: 0x400004, Virtual: 0x1008, Store: true, Context: 1, Timestamp: 6})}
	f.Add(recording(nil, a, b))
	f.Add(recording([]uint64{0x410fd0c1, 0x410fd083}, a, b))
	a.Switches = []perffile.SPESwitch{{CPU: 0, PID: 1, TID: 2, Time: 3}}
	a.Data = perffile.SPEPackets(perffile.SPEOp{PC: 0x400000, Virtual: 0x1000, Source: 0xe, Timestamp: 5})
	f.Add(recording(nil, a, b))
	f.Fuzz(func(t *testing.T, b []byte) {
		samplesOf(t, b)
	})
}
