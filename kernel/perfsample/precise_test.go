package perfsample

import (
	"encoding/binary"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/groundtruth/accesses"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// precise is a PEBS-shaped record of sampling.SampleType|Cgroup: id, ip,
// pid, tid, time, addr, cpu, res, period, data_src, cgroup.
func precise(id, ip uint64, pid, tid uint32, time, addr uint64, cpu uint32, src uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, 8)
	for _, v := range []uint64{id, ip, uint64(tid)<<32 | uint64(pid), time, addr, uint64(cpu), 1000, src, 77} {
		b = le.AppendUint64(b, v)
	}
	le.PutUint32(b, unix.PERF_RECORD_SAMPLE)
	le.PutUint16(b[6:], uint16(len(b)))
	return b
}

// decoderOfOwnCode is the address sampler's decoder with a detector at
// the precise samplers' window, and the entries of this process's own
// 8-byte store and 4-byte load functions, whose widths it decodes.
func decoderOfOwnCode(t *testing.T) (st, ld uint64, det *comdetect.Detector, d *feed.Decoder) {
	t.Helper()
	testenv.Require(t, runtime.GOARCH == "amd64", "the test's functions are checked as x86-64 code")
	st, ld, err := accesses.Entries()
	if err != nil {
		t.Fatal(err)
	}
	det = comdetect.New(comdetect.Options{Window: comdetect.PreciseWindow})
	return st, ld, det, procDecoder(t, det)
}

// oneTrueOneFalse checks that the detector found one true and one false
// sharing of period accesses each, every width decoded from the
// instruction (none left unknown, four bytes: the load's).
func oneTrueOneFalse(t *testing.T, det *comdetect.Detector, d *feed.Decoder, period uint64) {
	t.Helper()
	var total comdetect.Cell
	var widths [2]uint64
	d.View(func(det *comdetect.Detector, out memop.Outcomes) { total, widths = det.Totals(), out.Widths })
	if total.TrueCount != 1 || total.FalseCount != 1 || total.True != period || total.False != period {
		t.Errorf("detections %+v, want one true and one false sharing of %d accesses each", total, period)
	}
	if widths != [2]uint64{0, 4} {
		t.Errorf("widths %v: every sample's width should have come from its instruction", widths)
	}
}

// Precise samples fed to the address sampler's decoder (the comm collector
// on a host with PEBS or IBS): the detector classifies them with the
// access widths the records lack, decoded from this process's own code
// (read from /proc/self/mem and the test binary), and the table and the
// per-cgroup sharing take them once each. Thread 11's 8-byte store at a
// line's start and thread 12's 4-byte load of its bytes 4..7 share bytes
// (true sharing); a 4-byte load at byte 8 of another line after an 8-byte
// store at its start does not (false sharing).
func TestPreciseSamplesFeedTheDetector(t *testing.T) {
	st, ld, det, d := decoderOfOwnCode(t)
	cfgs := []sampling.Config{
		{Name: "mem-loads", PMU: "cpu", SampleType: sampling.SampleType | sampling.Cgroup, Period: 1000, Memory: true, Decode: true},
		{Name: "mem-stores", PMU: "cpu", SampleType: sampling.SampleType | sampling.Cgroup, Period: 1000, Memory: true, Decode: true},
	}
	attrs := make([]perfrecord.Attr, len(cfgs))
	for i, c := range cfgs {
		attrs[i] = perfrecord.Attr{Type: unix.PERF_TYPE_RAW, SampleType: c.SampleType, SampleIDAll: true, Period: c.Period}
	}
	events, err := perfrecord.NewEvents(attrs, [][]uint64{{1}, {2}})
	if err != nil {
		t.Fatal(err)
	}
	stats := samplestat.New(len(cfgs), 64)
	stats.TrackCgroups(8)
	stats.SetSharingWindow(0)
	sink := feed.NewSink(stats, d)
	s := &Sampler{cfgs: cfgs, events: events, sink: sink, periods: make([]atomic.Uint64, len(cfgs))}
	pid := uint32(os.Getpid())
	const lineA, lineB = 0x7f0000001000, 0x7f0000001040
	recs := [][]byte{
		precise(2, st, pid, 11, 100, lineA, 0, 0x04), // PERF_MEM_OP_STORE
		precise(1, ld, pid, 12, 200, lineA+4, 1, 0x02),
		precise(2, st, pid, 11, 300, lineB, 0, 0x04),
		precise(1, ld, pid, 12, 400, lineB+8, 1, 0x02),
	}
	var smp perfrecord.Sample
	sink.Begin()
	for _, r := range recs {
		if err := s.record(sink, r, &smp); err != nil {
			sink.End(0)
			t.Fatal(err)
		}
	}
	sink.End(math.MaxUint64)
	oneTrueOneFalse(t, det, d, 1000)
	snap := stats.Snapshot()
	if snap.Events[0].Samples != 2 || snap.Events[1].Samples != 2 {
		t.Errorf("samples by event %+v, want 2 and 2 (each counted once)", snap.Events)
	}
	// The table saw the same byte ranges: of the two loads, the one inside
	// the store's 8 bytes is true sharing, the other false.
	if snap.Sharing[cacheline.TrueSharing] != 1000 || snap.Sharing[cacheline.FalseSharing] != 1000 {
		t.Errorf("table sharing %v, want 1000 true and 1000 false", snap.Sharing)
	}
	cg := snap.Cgroups[77]
	if cg.Sharing[cacheline.TrueSharing] != 1000 || cg.Sharing[cacheline.FalseSharing] != 1000 {
		t.Errorf("cgroup 77's sharing %v, want the detector's: 1000 true, 1000 false, once each", cg.Sharing)
	}
}

// procDecoder is the address sampler's decoder reading the processes under
// /proc, feeding det.
func procDecoder(t *testing.T, det *comdetect.Detector) *feed.Decoder {
	t.Helper()
	procs, err := NewProcesses("/proc")
	if err != nil {
		t.Fatal(err)
	}
	d, err := feed.NewDecoder(procs, MonotonicNow, det)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
