package samplestat

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// benchLayout is what the exporter asks of PEBS mem-loads on Sapphire
// Rapids: identifier, ip, tid, time, addr, cpu, period, weight_struct,
// data_src (the sampling.SampleType order).
const benchLayout = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_WEIGHT_STRUCT |
	unix.PERF_SAMPLE_DATA_SRC

// benchBuffer is a ring's worth of records as the kernel writes them: 64
// threads loading and storing with a mix of sources, 80% of the accesses
// to 256 hot lines and the rest spread over 65536 cold ones, so that the
// 1024-line table keeps evicting.
func benchBuffer() ([]byte, int) {
	r := rand.New(rand.NewPCG(9, 9))
	srcs := []uint64{
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNone}.Encode(),
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode(),
		datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlLocRAM, LvlNum: datasrc.LvlNumRAM, Snoop: datasrc.SnoopMiss}.Encode(),
		datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1}.Encode(),
	}
	var buf []byte
	n := 0
	for len(buf) < 1<<20 {
		tid := uint32(r.IntN(64))
		var s perffile.Record
		s.U64(1).U64(0x401000 + r.Uint64N(4096)).U32(100).U32(100 + tid).U64(uint64(n) * 1000).
			U64(0x7f0000000000 + line(r)*64 + 8*uint64(tid%8)).U32(tid % 16).U32(0).U64(10007).
			U32(uint32(20 + r.IntN(400))).U16(0).U16(0).U64(srcs[r.IntN(len(srcs))])
		buf = append(buf, s.Bytes(unix.PERF_RECORD_SAMPLE, 0)...)
		n++
	}
	return buf, n
}

// BenchmarkDecodeAggregate is the sampling reader's work per record on
// one core: find the event, decode the sample, and aggregate it (class
// counts, latency histogram, cache line table); lines=off leaves the table
// out.
func BenchmarkDecodeAggregate(b *testing.B) {
	buf, n := benchBuffer()
	ev, err := perfrecord.NewEvents([]perfrecord.Attr{{SampleType: benchLayout, SampleIDAll: true}, {SampleType: benchLayout, SampleIDAll: true}}, [][]uint64{{1}, {2}})
	if err != nil {
		b.Fatal(err)
	}
	for _, lines := range []bool{true, false} {
		b.Run(map[bool]string{true: "lines=on", false: "lines=off"}[lines], func(b *testing.B) {
			stats := New(2, 1024)
			batch := stats.Lock()
			defer batch.Unlock()
			var s perfrecord.Sample
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for off := 0; off < len(buf); {
					rec := buf[off : off+int(le16(buf[off+6:]))]
					off += len(rec)
					i, err := ev.ForSample(rec)
					if err != nil {
						b.Fatal(err)
					}
					if err := perfrecord.DecodeSample(rec, &ev.Layouts[i], &s); err != nil {
						b.Fatal(err)
					}
					if lines {
						batch.Sample(i, &s, true, false)
					} else {
						batch.classify(i, &s)
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrecords/s")
		})
	}
}

func line(r *rand.Rand) uint64 {
	if r.IntN(5) != 0 {
		return r.Uint64N(256)
	}
	return 256 + r.Uint64N(65536)
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
