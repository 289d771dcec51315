package perfcount

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// BenchmarkCycle is one read cycle of the default software profile's two groups
// (8 events) on every online CPU, hotplug check included; group-cpu-reads/op says
// how many group reads one cycle makes, so ns/op ÷ that is the cost per group per CPU.
func BenchmarkCycle(b *testing.B) {
	testenv.RequireRoot(b)
	var evs []eventspec.Event
	for c := uint64(0); c < 7; c++ {
		evs = append(evs, eventspec.Event{Name: string(rune('a' + c)), PMU: "software", Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: c}, Scale: 1})
	}
	e := New(Options{
		Groups: []GroupSpec{
			{Name: "software", Events: evs},
			{Name: "cgroup-switches", Events: []eventspec.Event{{Name: "cgroup-switches", PMU: "software", Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: 11}, Scale: 1}}},
		},
		OnlineCPUs: host.NewOnlineCPUsReader("/sys").Read,
	})
	defer e.Close()
	e.Cycle()
	cpus, _ := host.OnlineCPUs("/sys")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Cycle()
	}
	b.ReportMetric(float64(2*len(cpus)), "group-cpu-reads/op")
}

// BenchmarkSnapshot is what a scrape costs the engine: copying the totals.
func BenchmarkSnapshot(b *testing.B) {
	testenv.RequireRoot(b)
	e := New(Options{
		Groups:     []GroupSpec{{Name: "software", Events: []eventspec.Event{{Name: "cpu-clock", PMU: "software", Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE}}}}},
		OnlineCPUs: func() ([]int, error) { return host.OnlineCPUs("/sys") },
	})
	defer e.Close()
	e.Cycle()
	e.Cycle()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.Snapshot()
	}
}
