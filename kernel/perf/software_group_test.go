package perf_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// TestSystemWideSoftwareGroupOnEveryCPU opens the software group on every online
// CPU and checks each count against an independent expectation: cpu-clock against
// the wall clock, page-faults against pages we touched, context-switches against
// blocking round trips we made. It is outside package perf so that it can
// measure in hotplugtest: a CPU another process takes offline and back
// within the run leaves the online list as it was but stops that CPU's
// group for good (its enabled time falls short), so such a run is measured
// again rather than judged.
func TestSystemWideSoftwareGroupOnEveryCPU(t *testing.T) {
	testenv.RequireRoot(t)
	var failures []string
	hotplugtest.Measure(t, func(int) { failures = softwareGroupOnEveryCPU(t) })
	for _, f := range failures {
		t.Error(f)
	}
}

var softwareGroup = []eventspec.Attr{
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK},
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK},
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS},
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
}

// softwareGroupOnEveryCPU opens the software group on each online CPU,
// counts a known workload, and says what disagreed.
func softwareGroupOnEveryCPU(t *testing.T) (failures []string) {
	fail := func(format string, a ...any) { failures = append(failures, fmt.Sprintf(format, a...)) }
	// Each group counts from its own open: on many CPUs the opens
	// themselves take tens of milliseconds, so each is timed.
	var groups []*perf.Group
	var opening, opened []time.Time
	for _, c := range testenv.OnlineCPUs(t) {
		start := time.Now()
		g, err := perf.OpenGroup(softwareGroup, []string{"cpu-clock", "task-clock", "page-faults", "context-switches"}, perf.SystemWide(c))
		if errors.Is(err, unix.ENODEV) {
			continue // offline since the list: hotplugtest.Measure measures again
		}
		if err != nil {
			t.Fatal(err)
		}
		opening, opened = append(opening, start), append(opened, time.Now())
		defer g.Close()
		groups = append(groups, g)
	}
	const pages, trips = 2000, 500
	touchPages(t, pages)
	pingPong(t, trips)
	time.Sleep(100 * time.Millisecond)

	var faults, switches uint64
	vals := make([]uint64, len(softwareGroup))
	for i, g := range groups {
		reading := time.Now()
		enabled, running, err := g.Read(vals)
		read := time.Now()
		if err != nil {
			fail("CPU %d: %v", g.CPU, err)
			continue
		}
		if enabled != running {
			fail("CPU %d: software group multiplexed (enabled %d, running %d)", g.CPU, enabled, running)
		}
		// System-wide cpu-clock counts elapsed time on the CPU, idle
		// included: at most the time from before the open to after the
		// read, at least 95% of the time from after the open to before it.
		most, least := read.Sub(opening[i]), reading.Sub(opened[i])
		if c := time.Duration(vals[0]); c > most || c < least*95/100 {
			fail("CPU %d: cpu-clock %v, wall clock since open %v to %v", g.CPU, c, least, most)
		}
		if e := time.Duration(enabled); e > most || e < least*95/100 {
			fail("CPU %d: time_enabled %v, wall clock since open %v to %v", g.CPU, e, least, most)
		}
		faults += vals[2]
		switches += vals[3]
	}
	if faults < pages {
		fail("page-faults over all CPUs = %d, fewer than the %d pages touched", faults, pages)
	}
	if switches < trips {
		fail("context-switches over all CPUs = %d, fewer than the %d blocking round trips", switches, trips)
	}
	return failures
}

// touchPages maps n fresh anonymous pages and writes each one: n page faults.
func touchPages(t *testing.T, n int) {
	page := os.Getpagesize()
	mem := testenv.FreshPages(t, n)
	for i := 0; i < n; i++ {
		mem[i*page] = 1
	}
}

// pingPong makes n blocking round trips between two OS threads over raw pipes;
// every blocking read is a context switch.
func pingPong(t *testing.T, n int) {
	var a, b [2]int
	if err := unix.Pipe(a[:]); err != nil {
		t.Fatal(err)
	}
	if err := unix.Pipe(b[:]); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, fd := range []int{a[0], a[1], b[0], b[1]} {
			unix.Close(fd)
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1]byte
		for i := 0; i < n; i++ {
			unix.Read(a[0], buf[:])
			unix.Write(b[1], buf[:])
		}
	}()
	var buf [1]byte
	for i := 0; i < n; i++ {
		unix.Write(a[1], buf[:])
		unix.Read(b[0], buf[:])
	}
	<-done
}
