package perf

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
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

// BenchmarkReadStyles compares, in one run, the two ways of reading the same five
// software events (those of node_exporter's perf collector) on every CPU: one
// PERF_FORMAT_GROUP read per CPU, as this exporter does, and one read per event per
// CPU, as perf-utils (node_exporter's perf collector) does.
func BenchmarkReadStyles(b *testing.B) {
	testenv.RequireRoot(b)
	configs := []uint64{unix.PERF_COUNT_SW_PAGE_FAULTS, unix.PERF_COUNT_SW_CONTEXT_SWITCHES,
		unix.PERF_COUNT_SW_CPU_MIGRATIONS, unix.PERF_COUNT_SW_PAGE_FAULTS_MIN, unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ}
	cpus := testenv.OnlineCPUs(b)
	attrs := make([]eventspec.Attr, len(configs))
	names := make([]string, len(configs))
	for i, c := range configs {
		attrs[i] = eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: c}
		names[i] = fmt.Sprint(c)
	}
	b.Run("grouped", func(b *testing.B) {
		var groups []*Group
		for _, cpu := range cpus {
			g, err := OpenGroup(attrs, names, SystemWide(cpu))
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			groups = append(groups, g)
		}
		vals := make([]uint64, len(attrs))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, g := range groups {
				if _, _, err := g.Read(vals); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("per-event", func(b *testing.B) {
		var fds []int
		for _, cpu := range cpus {
			for _, a := range attrs {
				u := Attr(a)
				u.Read_format = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING
				fd, err := unix.PerfEventOpen(&u, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(fd)
				fds = append(fds, fd)
			}
		}
		buf := make([]byte, 24)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, fd := range fds {
				if _, err := unix.Read(fd, buf); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
