package cgroupcount

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/cgroupattr"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// BenchmarkCgroups holds N cgroups in the kernel map and measures one
// attribution cycle (credit every CPU, read the map, update the series). It
// reports the process's open fds, the map's memory (the kernel's estimate)
// and the Go heap in use; and, side by side, the fds that perf's cgroup mode
// (PERF_FLAG_PID_CGROUP: one event per cgroup per CPU) takes for the same two
// events on the same cgroups, opened for real.
func BenchmarkCgroups(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("cgroups=%d", n), func(b *testing.B) {
			var names []string
			for i := range n {
				names = append(names, fmt.Sprintf("c%04d", i))
			}
			_, dirs := testenv.Cgroups(b, names...)
			r := newRig(b, Options{Depth: 1, MaxCgroups: 16384}, cgroupattr.Options{MaxSeries: 500, Grace: time.Minute})
			r.cycle(time.Second)
			// Run a task in each cgroup until the map holds them all (the
			// kernel skips the program for some switches).
			want := map[uint64]string{}
			for _, d := range dirs {
				id, err := cgroupid.ID(d)
				if err != nil {
					b.Fatal(err)
				}
				want[id] = d
			}
			for round := 0; len(want) > 0 && round < 20; round++ {
				var todo []string
				for _, d := range want {
					todo = append(todo, d)
				}
				runIn(b, todo)
				r.a.counter.Read(func(id uint64, _ [][]cgroupbpf.Reading) { delete(want, id) })
			}
			if len(want) > 0 {
				b.Fatalf("%d cgroups never reached the map", len(want))
			}
			r.cycle(time.Second)
			b.ResetTimer()
			for b.Loop() {
				r.a.Cycle(r.cpus)
			}
			b.StopTimer()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mapBytes, err := r.a.MapBytes()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(openFDs(b)), "fds")
			b.ReportMetric(float64(mapBytes), "map_bytes")
			b.ReportMetric(float64(ms.HeapInuse), "heap_bytes")
			b.ReportMetric(float64(r.a.Snapshot().Tracked), "tracked")
			b.ReportMetric(float64(perfCgroupFDs(b, dirs, r.cpus)), "perf_cgroup_mode_fds")
		})
	}
}

// perfCgroupFDs opens cpu-clock and task-clock for each cgroup on each CPU in
// perf's cgroup mode and returns how many fds that took.
func perfCgroupFDs(b *testing.B, dirs []string, cpus []int) int {
	before := openFDs(b)
	var groups []*perf.Group
	var files []*os.File
	defer func() {
		for _, g := range groups {
			g.Close()
		}
		for _, f := range files {
			f.Close()
		}
	}()
	attrs := []eventspec.Attr{{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}, {Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK}}
	for _, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, f)
		for _, cpu := range cpus {
			g, err := perf.OpenGroup(attrs, []string{"cpu-clock", "task-clock"}, perf.Target{CPU: cpu, CgroupFD: int(f.Fd())})
			if err != nil {
				b.Fatal(err)
			}
			groups = append(groups, g)
		}
	}
	return openFDs(b) - before - len(files) // the cgroup directory fds are not perf's
}
