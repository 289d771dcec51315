// Package hotplugtest lets a test whose expectations are per CPU notice
// that another process took a CPU offline (or brought one online) while it
// measured, and measure again.
package hotplugtest

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// Watch watches the CPUs that were online when it was made. The tests'
// machine lock (testenv.LockMachine) keeps this suite's hotplug tests away from
// tests whose expectations are per CPU, but not a neighbour's `echo 0 >
// .../online`, which closes what a test had open there (events, attached
// programs) and moves its threads. Such a test measures again when Offlined
// says a CPU left, rather than judge that run.
type Watch struct {
	fds     map[int]int // CPU -> a dummy event pinned there
	offline []int       // present CPUs that were offline when it began
	start   time.Time
}

// Start starts watching every online CPU: a dummy event on each,
// whose enabled time stops for good when its CPU goes offline (the kernel
// sets it OFF and does not bring it back). It needs perf_event_open on
// every CPU (root).
func Start(t testing.TB) *Watch {
	t.Helper()
	testenv.RequireRoot(t)
	w := &Watch{fds: map[int]int{}}
	t.Cleanup(w.close)
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY,
		Size: perf.AttrSize(), Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED}
	online := testenv.OnlineCPUs(t)
	for _, cpu := range testenv.PresentCPUs(t) {
		if !slices.Contains(online, cpu) {
			w.offline = append(w.offline, cpu)
		}
	}
	for _, cpu := range online {
		fd, err := perf.OpenFD(&attr, -1, cpu, -1, 0)
		if err == unix.ENODEV { // offline between the list and the open
			w.fds[cpu] = -1
			continue
		}
		if err != nil {
			t.Fatalf("watch CPU %d for hotplug: perf_event_open(dummy): %v", cpu, err)
		}
		w.fds[cpu] = fd
	}
	w.start = time.Now()
	return w
}

// Offlined says which CPU went offline since the watch began (even if it
// is back) or came online, or -1 where none did. A present CPU that was
// offline when the watch began counts too, back or not: another process
// held it offline just after the test's own hotplug or wait, and, still
// offline, it would be in neither the online list nor the watch.
func (w *Watch) Offlined(t testing.TB) int {
	t.Helper()
	if len(w.offline) > 0 {
		return w.offline[0]
	}
	online := testenv.OnlineCPUs(t)
	for _, cpu := range online {
		if _, ok := w.fds[cpu]; !ok {
			return cpu
		}
	}
	// One that went offline in the last few ms lags by less than the slack
	// below: it is missing from the list.
	for cpu := range w.fds {
		if !slices.Contains(online, cpu) {
			return cpu
		}
	}
	// While its CPU stays online a dummy event's enabled time lags the wall
	// clock by the reads around it, and by the time each of perf's cgroup
	// switches keeps the CPU's context scheduled out where cgroup events
	// are open there (tens of ms a second beside a cgroup-switching
	// neighbour); offline for the shortest hotplug (tens of ms) it lags by
	// that long, and stays still from then on. So a CPU that lags is read
	// again: still, it went offline.
	const slack = 5 * time.Millisecond
	wall := time.Since(w.start)
	lagging := map[int]uint64{}
	for cpu, fd := range w.fds {
		if fd < 0 {
			return cpu
		}
		if enabled := w.enabled(t, cpu); time.Duration(enabled) < wall-slack {
			lagging[cpu] = enabled
		}
	}
	if len(lagging) == 0 {
		return -1
	}
	time.Sleep(2 * time.Millisecond)
	for cpu, enabled := range lagging {
		if w.enabled(t, cpu) == enabled {
			return cpu
		}
	}
	return -1
}

// Saw says whether a CPU went offline or came online since the watch
// began (Offlined), and logs which as another process's doing, with what
// the test does about it (then: "toggling again").
func (w *Watch) Saw(t testing.TB, then string) bool {
	t.Helper()
	c := w.Offlined(t)
	if c >= 0 {
		t.Logf("CPU %d went offline or came online (another process): %s", c, then)
	}
	return c >= 0
}

// enabled is the time cpu's dummy event has been enabled, in ns.
func (w *Watch) enabled(t testing.TB, cpu int) uint64 {
	t.Helper()
	var b [16]byte
	if _, err := unix.Read(w.fds[cpu], b[:]); err != nil {
		t.Fatalf("read CPU %d's hotplug watch: %v", cpu, err)
	}
	return binary.LittleEndian.Uint64(b[8:])
}

// Stop closes the watch's events (Start also closes them when the test
// ends): for a test that watches many short windows.
func (w *Watch) Stop() { w.close() }

func (w *Watch) close() {
	for _, fd := range w.fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	w.fds = nil
}

// Measure runs measure up to three times until a run during which
// no CPU went offline or came online (each run starts once every present
// CPU is online, or after 5 s with those that are), and returns the number of that run (or 3, the last
// taken whatever happened, logged); measure opens afresh what it needs,
// since a CPU that went offline closed what was open there.
func Measure(t testing.TB, measure func(try int)) int {
	t.Helper()
	for try := 1; ; try++ {
		testenv.AwaitPresentOnline(t, 5*time.Second)
		w := Start(t)
		measure(try)
		cpu := w.Offlined(t)
		w.close()
		if cpu < 0 {
			return try
		}
		if try == 3 {
			t.Logf("CPU %d went offline during run %d too (hotplug by another process): judging it", cpu, try)
			return try
		}
		t.Logf("CPU %d went offline during run %d (hotplug by another process): measuring again", cpu, try)
	}
}
