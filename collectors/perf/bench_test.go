package perf

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// BenchmarkGroupRead is the cost of reading one group on one CPU: one read(2) of
// PERF_FORMAT_GROUP plus decoding, for groups of 1 to 8 software events.
func BenchmarkGroupRead(b *testing.B) {
	testenv.RequireRoot(b)
	for _, n := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			attrs := make([]eventspec.Attr, n)
			names := make([]string, n)
			for i := range attrs {
				attrs[i] = eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: uint64(i % 9)}
				names[i] = fmt.Sprint(i)
			}
			g, err := OpenGroup(attrs, names, SystemWide(0))
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			vals := make([]uint64, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := g.Read(vals); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
