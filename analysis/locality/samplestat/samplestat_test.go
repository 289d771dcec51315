package samplestat

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// The latency buckets are client_golang's own native histogram buckets
// under schema 3 (bucket factor 2^(1/8)).
func TestLatencyBucketsMatchClientGolang(t *testing.T) {
	ref := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", NativeHistogramBucketFactor: 1.0905077326652577,
		NativeHistogramZeroThreshold: prometheus.NativeHistogramZeroThresholdZero})
	var lb latencyBuckets
	r := rand.New(rand.NewPCG(1, 1))
	for range 20000 {
		w := uint64(r.ExpFloat64()*300) + 1
		if r.IntN(100) == 0 {
			w = r.Uint64N(1 << 20) // beyond the cached range
		}
		ref.Observe(float64(w))
		lb.observe(w)
	}
	l := lb.export()
	var m dto.Metric
	if err := ref.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSchema() != Schema {
		t.Fatalf("client_golang chose schema %d", h.GetSchema())
	}
	want := map[int]int64{}
	idx, count := int32(0), int64(0)
	deltas := h.GetPositiveDelta()
	for _, sp := range h.GetPositiveSpan() {
		idx += sp.GetOffset()
		for range sp.GetLength() {
			count += deltas[0]
			deltas = deltas[1:]
			if count != 0 {
				want[int(idx)] = count
			}
			idx++
		}
	}
	if len(want) != len(l.Buckets) {
		t.Errorf("%d buckets, client_golang %d", len(l.Buckets), len(want))
	}
	for k, v := range want {
		if l.Buckets[k] != v {
			t.Errorf("bucket %d: %d, client_golang %d", k, l.Buckets[k], v)
		}
	}
	if float64(l.Count) != float64(h.GetSampleCount()) || l.Sum != h.GetSampleSum() {
		t.Errorf("count %d sum %v, client_golang %d %v", l.Count, l.Sum, h.GetSampleCount(), h.GetSampleSum())
	}
}

// Hand-counted samples: classes, estimated accesses, latency, the
// cache line table, lost and throttled records, and IBS' address filter.
func TestAggregate(t *testing.T) {
	s := New(3, 64)
	l3hitm := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode()
	dram := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlLocRAM, LvlNum: datasrc.LvlNumRAM, Snoop: datasrc.SnoopMiss}.Encode()
	store := datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNA}.Encode()
	const mem = unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_TID
	b := s.Lock()
	for i, smp := range []perfrecord.Sample{
		{Has: mem, Addr: 0x1000, TID: 1, Period: 100, DataSrc: l3hitm, Weight: 250},
		{Has: mem, Addr: 0x1008, TID: 2, Period: 100, DataSrc: store},
		{Has: mem, Addr: 0x1000, TID: 1, Period: 100, DataSrc: l3hitm, Weight: 260},
		{Has: mem, Addr: 0x9000, TID: 3, Period: 200, DataSrc: dram, Weight: 0},
	} {
		b.Sample([]int{0, 1, 0, 0}[i], &smp, true, false)
	}
	b.Sample(2, &perfrecord.Sample{Has: mem, Addr: 0}, true, true) // an IBS op without an address
	b.Sample(2, &perfrecord.Sample{Has: mem, Addr: 0x42, Period: 7, DataSrc: 0x1e05080021}, false, true)
	b.Lost(1, 5)
	b.Lost(-1, 2)
	b.Throttled(0)
	b.Unlock()
	snap := s.Snapshot()
	if snap.Events[0] != (Event{Samples: 3, Throttled: 1}) || snap.Events[1] != (Event{Samples: 1, Lost: 5}) ||
		snap.Events[2] != (Event{Samples: 1, Filtered: 1}) || snap.Lost != 2 {
		t.Errorf("events %+v lost %d", snap.Events, snap.Lost)
	}
	if c := snap.Classes[0][datasrc.SourceL3][snoopAt("hitm")]; c != (Class{Samples: 2, Accesses: 200}) {
		t.Errorf("load/l3/hitm %+v", c)
	}
	if c := snap.Classes[0][datasrc.SourceLocalDRAM][snoopAt("miss")]; c != (Class{Samples: 1, Accesses: 200}) {
		t.Errorf("load/local_dram/miss %+v", c)
	}
	if c := snap.Classes[1][datasrc.SourceL1][snoopAt("na")]; c != (Class{Samples: 1, Accesses: 100}) {
		t.Errorf("store/l1/na %+v", c)
	}
	// 250 and 260 lie in (2^(63/8), 2^(64/8)] = (235, 256] and (256, 279].
	if snap.Latency.Count != 2 || snap.Latency.Sum != 510 || snap.Latency.Buckets[64] != 1 || snap.Latency.Buckets[65] != 1 {
		t.Errorf("latency %+v", snap.Latency)
	}
	// T2's store next to T1's load: false sharing; T1's second load: the
	// store was on other bytes, false again.
	if snap.Sharing[2] != 200 || snap.Sharing[1] != 0 {
		t.Errorf("sharing %v", snap.Sharing)
	}
	if r := s.Cachelines(1, cacheline.DisplayAny, nil); len(r.Lines) != 1 || r.Lines[0].Address != "0x1000" || r.Lines[0].LocalHITM != 2 {
		t.Errorf("cachelines %+v", r)
	}
}

// The hot path allocates nothing per sample once the classes it meets exist.
func TestNoAllocation(t *testing.T) {
	s := New(1, 64)
	smp := perfrecord.Sample{Has: unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_PERIOD, Addr: 0x1000, Period: 1,
		DataSrc: datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL1}.Encode(), Weight: 7}
	b := s.Lock()
	defer b.Unlock()
	b.Sample(0, &smp, true, false)
	if n := testing.AllocsPerRun(1000, func() { b.Sample(0, &smp, true, false) }); n != 0 {
		t.Errorf("%v allocations per sample", n)
	}
}

// snoopAt is the index of a snoop label value.
func snoopAt(name string) int { return slices.Index(Snoops[:], name) }

// Per-cgroup shares: each cgroup's samples by event and class, its sharing
// events, and the cgroups beyond the bound summed in OtherCgroup.
func TestCgroups(t *testing.T) {
	s := New(2, 64)
	s.TrackCgroups(2)
	load := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL2, LvlNum: datasrc.LvlNumL2, Snoop: datasrc.SnoopNone}.Encode()
	store := datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1}.Encode()
	const has = unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_CGROUP | unix.PERF_SAMPLE_TID
	b := s.Lock()
	b.Sample(0, &perfrecord.Sample{Has: has, Cgroup: 10, Addr: 0x40, TID: 1, Period: 5, DataSrc: load}, true, false)
	b.Sample(1, &perfrecord.Sample{Has: has, Cgroup: 10, Addr: 0x48, TID: 2, Period: 5, DataSrc: store}, true, false) // false sharing with TID 1
	b.Sample(0, &perfrecord.Sample{Has: has, Cgroup: 20, Addr: 0x4000, TID: 3, Period: 5, DataSrc: load}, true, false)
	b.Sample(0, &perfrecord.Sample{Has: has, Cgroup: 30, Addr: 0x8000, TID: 4, Period: 5, DataSrc: load}, true, false)
	b.Sample(0, &perfrecord.Sample{Has: has, Cgroup: 40, Addr: 0x9000, TID: 5, Period: 5, DataSrc: load}, true, false)
	b.Sample(1, &perfrecord.Sample{Has: unix.PERF_SAMPLE_ADDR, Addr: 0x1}, false, false) // no cgroup id
	b.Unlock()
	cg := s.Snapshot().Cgroups
	if len(cg) != 3 || cg[10].Samples[0] != 1 || cg[10].Samples[1] != 1 || cg[20].Samples[0] != 1 || cg[OtherCgroup].Samples[0] != 2 {
		t.Fatalf("cgroups %+v", cg)
	}
	if c := cg[10].Classes[0][datasrc.SourceL2]; c != (Class{Samples: 1, Accesses: 5}) {
		t.Errorf("cgroup 10 load/l2 %+v", c)
	}
	if cg[10].Sharing[2] != 5 || cg[20].Sharing[2] != 0 {
		t.Errorf("sharing %v %v", cg[10].Sharing, cg[20].Sharing)
	}
}

// IBS op samples as the kernel writes them for the exporter's ibs_op event
// (identifier, ip, tid, time, addr, cpu, period, weight_struct, data_src):
// a load served by another CCX of the node (Zen 4's data source extension,
// which the kernel reports as any-cache, remote bit, HOPS_0), a store, and
// an op that is neither, without a data address, which IBS samples too.
func TestIBSOpSamples(t *testing.T) {
	const st = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
		unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_WEIGHT_STRUCT | unix.PERF_SAMPLE_DATA_SRC
	nearCCX := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlRemCCE1, LvlNum: datasrc.LvlNumAnyCache, Remote: true, Hops: datasrc.Hops0, Snoop: datasrc.SnoopHit}.Encode()
	store := datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNA}.Encode()
	notMem := datasrc.DataSrc{Op: datasrc.OpNA, Lvl: datasrc.LvlNA, Snoop: datasrc.SnoopNA, LvlNum: datasrc.LvlNumNA}.Encode()
	record := func(addr, weight, src uint64) []byte {
		var r perffile.Record
		r.U64(11).U64(0x401000).U32(7).U32(8).U64(100).U64(addr).U32(3).U32(0).U64(0x10000).U32(uint32(weight)).U16(0).U16(0).U64(src)
		return r.Bytes(unix.PERF_RECORD_SAMPLE, 0)
	}
	s := New(1, 64)
	b := s.Lock()
	var smp perfrecord.Sample
	for _, rec := range [][]byte{record(0x7f0000001000, 180, nearCCX), record(0x7f0000002000, 0, store), record(0, 0, notMem)} {
		if err := perfrecord.DecodeSample(rec, &perfrecord.Layout{SampleType: st}, &smp); err != nil {
			t.Fatal(err)
		}
		b.Sample(0, &smp, true, true)
	}
	b.Unlock()
	snap := s.Snapshot()
	if snap.Events[0] != (Event{Samples: 2, Filtered: 1}) {
		t.Errorf("events %+v", snap.Events[0])
	}
	if c := snap.Classes[0][datasrc.SourcePeerCache][snoopAt("hit")]; c != (Class{Samples: 1, Accesses: 0x10000}) {
		t.Errorf("load/peer_cache/hit %+v", c)
	}
	if c := snap.Classes[1][datasrc.SourceL1][snoopAt("na")]; c.Samples != 1 {
		t.Errorf("store/l1/na %+v", c)
	}
	if snap.Latency.Count != 1 || snap.Latency.Sum != 180 {
		t.Errorf("latency %+v", snap.Latency)
	}
}

func TestForgetCgroups(t *testing.T) {
	s := New(1, 8)
	s.TrackCgroups(2)
	b := s.Lock()
	for _, id := range []uint64{1, 2, 3} { // 3 goes to OtherCgroup
		b.Sample(0, &perfrecord.Sample{Has: unix.PERF_SAMPLE_CGROUP, Cgroup: id}, false, false)
	}
	b.Unlock()
	if ids := s.CgroupIDs(); len(ids) != 2 {
		t.Fatalf("ids %v", ids)
	}
	s.ForgetCgroups([]uint64{1})
	b = s.Lock()
	b.Sample(0, &perfrecord.Sample{Has: unix.PERF_SAMPLE_CGROUP, Cgroup: 4}, false, false) // takes 1's place
	b.Unlock()
	cg := s.Snapshot().Cgroups
	if _, ok := cg[1]; ok || cg[4].Samples[0] != 1 || cg[OtherCgroup].Samples[0] != 1 {
		t.Errorf("after forgetting 1: %+v", cg)
	}
}
