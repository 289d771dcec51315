package perfsample

import (
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/formats/spe"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// fakeArea is an AUX area in ordinary memory (no SPE here): the chunks the
// records announce, laid end to end.
type fakeArea []byte

func (f fakeArea) Aux(off, size uint64) []byte {
	if off > uint64(len(f)) || size > uint64(len(f))-off {
		return nil
	}
	return f[off : off+size]
}

func (f fakeArea) AuxSize() int { return len(f) }

// speTrailer is the sample_id of sampling.AuxSampleType: pid, tid, time,
// cpu, res, identifier.
func speTrailer(r *perffile.Record, time uint64, cpu uint32) {
	r.U32(^uint32(0)).U32(^uint32(0)).U64(time).U32(cpu).U32(0).U64(5)
}

// switchTo is a CPU-wide switch out to (pid, tid) at time.
func switchTo(pid, tid uint32, time uint64, cpu uint32) []byte {
	var r perffile.Record
	r.U32(pid).U32(tid)
	speTrailer(&r, time, cpu)
	return r.Bytes(unix.PERF_RECORD_SWITCH_CPU_WIDE, unix.PERF_RECORD_MISC_SWITCH_OUT)
}

// auxRec is the kernel's AUX record of a chunk.
func auxRec(off, size, flags uint64, time uint64, cpu uint32) []byte {
	var r perffile.Record
	r.U64(off).U64(size).U64(flags)
	speTrailer(&r, time, cpu)
	return r.Bytes(perfrecord.TypeAux, 0)
}

// Arm SPE records, as two CPUs' AUX areas announce them, feed the address
// sampler's decoder as PEBS samples do: each CPU's switches name the
// threads (its kernel puts no PIDs in CONTEXTIDR), each record stands for
// the period's operations at its time moved onto CLOCK_MONOTONIC, and the
// detector classifies them with the widths of their instructions. Thread
// 11's 8-byte store at a line's start and thread 12's 4-byte load of its
// bytes 4..7 share bytes (true sharing); a 4-byte load at byte 8 of
// another line after an 8-byte store at its start does not (false
// sharing); the process's cgroup is looked up, its records carrying none.
// A branch makes no sample, and the AUX records' loss flags are counted.
func TestSPEChunksFeedTheDetector(t *testing.T) {
	st, ld, det, d := decoderOfOwnCode(t)
	var fed []memaccess.Access
	d.Observe(func(a *memaccess.Access) { fed = append(fed, *a) })
	cfgs := []sampling.Config{{Name: "arm_spe", PMU: "arm_spe_0", SampleType: sampling.AuxSampleType | sampling.Cgroup, Period: 4096, Memory: true, Decode: true, Aux: true}}
	events, err := perfrecord.NewEvents([]perfrecord.Attr{{Type: 9, SampleType: sampling.AuxSampleType, SampleIDAll: true, Period: 4096}}, [][]uint64{{5}})
	if err != nil {
		t.Fatal(err)
	}
	stats := samplestat.New(1, 64)
	stats.TrackCgroups(8)
	stats.SetSharingWindow(0)
	pid := uint32(os.Getpid())
	cgroupOf := func(p uint32) (uint64, bool) { return 77, p == pid } // the records carry none
	sink := feed.NewSink(stats, d)
	s := &Sampler{cfgs: cfgs, opts: Options{CgroupOf: cgroupOf}, events: events, sink: sink, periods: make([]atomic.Uint64, 1)}
	s.periods[0].Store(4096)
	const offset = 1_000_000
	s.clockOffset.Store(offset)

	const lineA, lineB = 0x7f0000001000, 0x7f0000001040
	const n1 = 0x410fd0c1
	stores := perffile.SPEPackets(
		perffile.SPEOp{PC: st, Virtual: lineA, Store: true, Timestamp: 100},
		perffile.SPEOp{PC: st + 4, Branch: true, Timestamp: 150},
		perffile.SPEOp{PC: st, Virtual: lineB, Store: true, Timestamp: 300})
	loads := perffile.SPEPackets(
		perffile.SPEOp{PC: ld, Virtual: lineA + 4, Source: spe.SourcePeerCore, Total: 90, Timestamp: 200},
		perffile.SPEOp{PC: ld, Virtual: lineB + 8, Source: spe.SourcePeerCore, Total: 90, Timestamp: 400})
	rings := []struct {
		a    *auxRing
		recs [][]byte
	}{
		{&auxRing{area: fakeArea(stores), stream: &spe.Stream{CPU: 0, MIDR: n1}},
			[][]byte{switchTo(pid, 11, 50, 0), auxRec(0, uint64(len(stores)), 0, 500, 0)}},
		{&auxRing{area: fakeArea(loads), stream: &spe.Stream{CPU: 1, MIDR: n1}},
			[][]byte{switchTo(pid, 12, 60, 1), auxRec(0, uint64(len(loads)), perfrecord.AuxTruncated|perfrecord.AuxCollision, 500, 1),
				auxRec(8, uint64(len(loads)), 0, 510, 1)}}, // beyond the area: an error, not a panic
	}
	var smp perfrecord.Sample
	sink.Begin()
	var errs []string
	for _, r := range rings {
		r.a.stream.TC.Mult = 1 // perf time = the count
		for _, rec := range r.recs {
			if _, _, err := s.auxRecord(sink, r.a, rec, &smp); err != nil {
				errs = append(errs, err.Error())
			}
		}
		sink.Filtered(0, r.a.stream.Other)
	}
	sink.End(math.MaxUint64)
	if len(errs) != 1 || !strings.Contains(errs[0], "more than the") {
		t.Errorf("errors %q, want the one record beyond its area", errs)
	}
	if len(fed) != 4 {
		t.Fatalf("%d accesses fed, want 4", len(fed))
	}
	for i, want := range []struct {
		time uint64
		tid  uint32
	}{{100, 11}, {200, 12}, {300, 11}, {400, 12}} {
		if a := fed[i]; a.Time != want.time+offset || a.TID != want.tid || a.PID != pid || a.Period != 4096 {
			t.Errorf("access %d: time %d, pid %d, tid %d, period %d; want time %d, thread %d of %d, period 4096", i, a.Time, a.PID, a.TID, a.Period, want.time+offset, want.tid, pid)
		}
	}
	oneTrueOneFalse(t, det, d, 4096)
	snap := stats.Snapshot()
	if e := snap.Events[0]; e.Samples != 4 || e.Filtered != 1 || e.AuxLost != [samplestat.NumAuxLosses]uint64{1, 1, 0} {
		t.Errorf("event totals %+v, want 4 samples, 1 filtered, one truncation and one collision", e)
	}
	if snap.Sharing[cacheline.TrueSharing] != 4096 || snap.Sharing[cacheline.FalseSharing] != 4096 {
		t.Errorf("table sharing %v, want 4096 true and 4096 false", snap.Sharing)
	}
	if cg := snap.Cgroups[77]; cg.Sharing[cacheline.TrueSharing] != 4096 || cg.Sharing[cacheline.FalseSharing] != 4096 {
		t.Errorf("the process's cgroup's sharing %v, want the detector's: 4096 true, 4096 false", cg.Sharing)
	}
}

// An AUX config whose PMU writes no AUX area (a software event stands in
// for SPE here) fails on every CPU with the kernel's reason, its fds
// closed; the sampler opens with the others.
func TestAuxConfigWithoutAuxArea(t *testing.T) {
	testenv.RequireRoot(t)
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := fds()
	clock := sampling.Decoded(1_000_000, false, 1) // the first user register
	fake := clock
	fake.Name, fake.Aux, fake.Decode, fake.SampleType = "fake_spe", true, false, sampling.AuxSampleType
	cpus := []int{0}
	smp, failures, err := Open([]sampling.Config{fake, clock}, cpus, feed.NewSink(samplestat.New(2, 16), nil), Options{Pages: 1})
	if err != nil {
		t.Fatalf("%v: %+v", err, failures)
	}
	if len(failures) != 1 || failures[0].Event != "fake_spe" || !strings.Contains(failures[0].Err.Error(), "writes no AUX area") {
		t.Errorf("failures %+v", failures)
	}
	if c := smp.Configs(); len(c) != 1 || c[0].Name != "cpu-clock" {
		t.Errorf("configs %+v, want the clock alone", c)
	}
	if err := smp.Close(); err != nil {
		t.Fatal(err)
	}
	if after := fds(); after != before {
		t.Errorf("%d fds open before, %d after", before, after)
	}
}

// Whatever an SPE event's data area and AUX area hold, the reader takes
// it without panicking: a bad record is an error, and every sample it
// makes has the event's period.
func FuzzAuxRecord(f *testing.F) {
	chunk := perffile.SPEPackets(perffile.SPEOp{PC: 0x400000, Virtual: 0x1000, Source: spe.SourcePeerCore, Timestamp: 5},
		perffile.SPEOp{PC: 0x400004, Virtual: 0x1008, Store: true, Timestamp: 9})
	f.Add(switchTo(1, 2, 3, 0), chunk)
	f.Add(auxRec(0, uint64(len(chunk)), perfrecord.AuxTruncated, 10, 0), chunk)
	f.Add(auxRec(1<<40, 1<<20, 0, 10, 0), chunk)
	f.Add(switchTo(1, 2, 3, 0)[:20], []byte{0x49})
	f.Fuzz(func(t *testing.T, rec, area []byte) {
		cfgs := []sampling.Config{{Name: "arm_spe", PMU: "arm_spe_0", SampleType: sampling.AuxSampleType | sampling.Cgroup, Period: 4096, Memory: true, Aux: true}}
		events, err := perfrecord.NewEvents([]perfrecord.Attr{{Type: 9, SampleType: cfgs[0].SampleType, SampleIDAll: true}}, [][]uint64{{5}})
		if err != nil {
			t.Fatal(err)
		}
		stats := samplestat.New(1, 16)
		sink := feed.NewSink(stats, nil)
		s := &Sampler{cfgs: cfgs, events: events, sink: sink, periods: make([]atomic.Uint64, 1),
			opts: Options{CgroupOf: func(uint32) (uint64, bool) { return 7, true }}}
		s.periods[0].Store(4096)
		a := &auxRing{area: fakeArea(area), stream: &spe.Stream{MIDR: 0x410fd0c1, TC: perfdata.TimeConv{Mult: 1}}}
		var smp perfrecord.Sample
		sink.Begin()
		s.auxRecord(sink, a, rec, &smp)
		s.auxRecord(sink, a, auxRec(0, uint64(len(area)), 0, 1, 0), &smp)
		sink.End(0)
		snap := stats.Snapshot()
		for _, c := range snap.Classes {
			for _, src := range c {
				for _, k := range src {
					if k.Accesses != k.Samples*4096 {
						t.Fatalf("class of %d samples, %d accesses: not the period each", k.Samples, k.Accesses)
					}
				}
			}
		}
	})
}
