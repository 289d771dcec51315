package perfcount

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/model"
)

func sw(name string, config uint64, cpus ...int) eventspec.Event {
	ev := eventspec.Event{Spec: name, Name: name, PMU: "software", Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: config}, Scale: 1}
	if len(cpus) > 0 {
		ev.CPUs = cpus
	}
	return ev
}

func realOnline(t *testing.T) func() ([]int, error) {
	return func() ([]int, error) { return host.OnlineCPUs("/sys") }
}

func find(t *testing.T, s Snapshot, event string) EventTotals {
	t.Helper()
	for _, e := range s.Events {
		if e.Event == event {
			return e
		}
	}
	t.Fatalf("no event %s in snapshot", event)
	return EventTotals{}
}

func group(t *testing.T, s Snapshot, name string) GroupTotals {
	t.Helper()
	for _, g := range s.Groups {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no group %s in snapshot", name)
	return GroupTotals{}
}

func TestEngineCountsOnEveryCPU(t *testing.T) {
	testenv.RequireRoot(t)
	online, _ := host.OnlineCPUs("/sys")
	var observed []float64
	e := New(Options{
		Groups: []GroupSpec{
			{Name: "software", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK), sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS)}},
			{Name: "bogus", Events: []eventspec.Event{sw("no-such-event", 9999)}},
			{Name: "cpu0-only", Events: []eventspec.Event{sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK, 0)}},
		},
		OnlineCPUs:  realOnline(t),
		ObserveRead: func(s float64) { observed = append(observed, s) },
	})
	defer e.Close()

	before := time.Now()
	e.Cycle() // opens
	after := time.Now()
	if s := e.Snapshot(); len(find(t, s, "cpu-clock").PerCPU) != 0 {
		t.Fatalf("a group never read must have no value, got %v", find(t, s, "cpu-clock").PerCPU)
	}
	const pages = 1000
	mem := testenv.FreshPages(t, pages)
	for i := 0; i < pages; i++ {
		mem[i*os.Getpagesize()] = 1
	}
	time.Sleep(50 * time.Millisecond)
	mid := time.Now()
	e.Cycle() // reads
	end := time.Now()

	s := e.Snapshot()
	cc := find(t, s, "cpu-clock")
	if !slices.Equal(model.SortedCPUs(cc.PerCPU), online) {
		t.Errorf("cpu-clock on CPUs %v, online %v", model.SortedCPUs(cc.PerCPU), online)
	}
	for cpu, v := range cc.PerCPU {
		// The counter ran from inside the first cycle to inside the second.
		if lo, hi := mid.Sub(after), end.Sub(before); time.Duration(v) < lo || time.Duration(v) > hi {
			t.Errorf("CPU %d cpu-clock %v outside [%v, %v]", cpu, time.Duration(v), lo, hi)
		}
	}
	if pf := find(t, s, "page-faults").Sum(); pf < pages {
		t.Errorf("page-faults %d < %d pages touched", pf, pages)
	}
	if g := group(t, s, "software"); g.OpenCPUs != len(online) || g.NotRunning != 0 {
		t.Errorf("software group: %+v", g)
	}
	bogus := group(t, s, "bogus")
	if bogus.OpenCPUs != 0 || bogus.Failures[model.ReasonUnsupported] != len(online) {
		t.Errorf("bogus group failures = %v, want unsupported on %d CPUs", bogus.Failures, len(online))
	}
	if c := model.SortedCPUs(find(t, s, "task-clock").PerCPU); !slices.Equal(c, []int{0}) {
		t.Errorf("cpu0-only group counted on %v", c)
	}
	if len(observed) != 2 || observed[1] <= 0 {
		t.Errorf("read durations observed: %v", observed)
	}
}

// TestEngineFollowsHotplug drives the online list by hand: the syscalls are real,
// only the list of CPUs changes. A round in which another process took a
// real CPU offline is done again (five at most).
func TestEngineFollowsHotplug(t *testing.T) {
	testenv.RequireRoot(t)
	var online []int
	testenv.EveryCPUOnline(t, func() { online, _ = host.OnlineCPUs("/sys") })
	testenv.Require(t, len(online) >= 2, "needs two CPUs")
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatalf("another process hotplugged CPUs during %d rounds", round)
		}
		testenv.AwaitPresentOnline(t, 5*time.Second)
		w := hotplugtest.Start(t)
		failures := followHotplug(t, online)
		if w.Saw(t, fmt.Sprintf("round %d again", round)) {
			w.Stop()
			continue
		}
		for _, f := range failures {
			t.Error(f)
		}
		return
	}
}

// followHotplug runs an engine over a hand-driven list of the CPUs online
// (all, then all but the last, then all again), and says what went wrong.
func followHotplug(t *testing.T, online []int) (failures []string) {
	current := online
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}}},
		OnlineCPUs: func() ([]int, error) { return current, nil },
	})
	defer e.Close()
	fail := func(format string, a ...any) { failures = append(failures, fmt.Sprintf(format, a...)) }
	last := online[len(online)-1]
	e.Cycle()
	time.Sleep(20 * time.Millisecond)
	e.Cycle()
	t1 := find(t, e.Snapshot(), "cpu-clock").PerCPU[last]

	current = online[:len(online)-1] // the last CPU goes offline
	time.Sleep(20 * time.Millisecond)
	e.Cycle()
	s := e.Snapshot()
	if g := group(t, s, "clock"); g.OpenCPUs != len(online)-1 {
		fail("after offline: group open on %d CPUs, want %d", g.OpenCPUs, len(online)-1)
		return failures
	}
	t2 := find(t, s, "cpu-clock").PerCPU[last]
	if t2 <= t1 {
		fail("the final read before closing was lost: %d then %d", t1, t2)
	}
	time.Sleep(20 * time.Millisecond)
	e.Cycle()
	if t3 := find(t, e.Snapshot(), "cpu-clock").PerCPU[last]; t3 != t2 {
		fail("offline CPU's total moved from %d to %d", t2, t3)
	}

	current = online // back online: reopened, totals continue from t2
	e.Cycle()
	time.Sleep(20 * time.Millisecond)
	e.Cycle()
	s = e.Snapshot()
	if g := group(t, s, "clock"); g.OpenCPUs != len(online) {
		fail("after online: open on %d CPUs", g.OpenCPUs)
		return failures
	}
	if t4 := find(t, s, "cpu-clock").PerCPU[last]; t4 < t2+uint64(15*time.Millisecond) {
		fail("after reopen the total %d did not continue from %d", t4, t2)
	}
	return failures
}

// TestEngineRealHotplug takes a CPU offline through sysfs, as an operator
// would, and back: the engine closes its group there, then opens it again
// and counts the CPU's time. Another process's hotplug between the test's
// writes and its checks is not the engine's doing: that round is done
// again (ten more at most).
func TestEngineRealHotplug(t *testing.T) {
	last, ctl := testenv.HotplugCPU(t)
	online := testenv.OnlineCPUs(t)
	without := slices.DeleteFunc(slices.Clone(online), func(c int) bool { return c == last })
	set := func(v string) {
		t.Helper()
		if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
			t.Fatalf("CPU %d online=%s: %v", last, v, err)
		}
	}
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}}},
		OnlineCPUs: realOnline(t),
	})
	defer e.Close()
	for round := 0; ; round++ {
		if round == 10 {
			t.Fatalf("another process hotplugged CPUs during %d rounds", round)
		}
		testenv.AwaitPresentOnline(t, 5*time.Second)
		e.Cycle()
		set("0")
		e.Cycle()
		if g := group(t, e.Snapshot(), "clock"); g.OpenCPUs != len(without) {
			if now := testenv.OnlineCPUs(t); !slices.Equal(now, without) {
				t.Logf("round %d: CPUs %v online after offlining CPU %d (another process): again", round, now, last)
				continue
			}
			t.Fatalf("with CPU %d offline the group is open on %d CPUs", last, g.OpenCPUs)
		}
		set("1")
		w := hotplugtest.Start(t)
		e.Cycle()
		before := find(t, e.Snapshot(), "cpu-clock").PerCPU[last]
		time.Sleep(30 * time.Millisecond)
		e.Cycle()
		s := e.Snapshot()
		after := find(t, s, "cpu-clock").PerCPU[last]
		if w.Saw(t, fmt.Sprintf("round %d again", round)) {
			continue
		}
		if g := group(t, s, "clock"); g.OpenCPUs != len(online) || after-before < uint64(20*time.Millisecond) {
			t.Errorf("after onlining: open on %d CPUs, CPU %d counted %v in 30ms", g.OpenCPUs, last, time.Duration(after-before))
		}
		return
	}
}

// TestEngineWakesOnHotplug runs the engine with a cycle an hour apart and
// the kernel's hotplug uevents: a CPU taken offline is closed, and one
// brought back is opened, at the uevent, with no cycle due; its group of
// two, which the kernel breaks up at the offline, is read there whole.
// The CPU is set back online when the test ends (HotplugCPU).
func TestEngineWakesOnHotplug(t *testing.T) {
	last, ctl := testenv.HotplugCPU(t)
	online := testenv.OnlineCPUs(t)
	l, err := cpuhotplug.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan error, 1)
	go func() { listening <- l.Run(ctx) }()
	hotplug, _ := l.Subscribe()
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK), sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK)}}},
		OnlineCPUs: realOnline(t),
		Hotplug:    hotplug,
	})
	running := make(chan struct{})
	go func() { e.Run(ctx, time.Hour); close(running) }()
	defer func() { cancel(); <-running; <-listening }()
	// awaitOpen waits up to 10 s for the group to be open on n CPUs.
	awaitOpen := func(n int) bool {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if e.Cycles() > 0 && group(t, e.Snapshot(), "clock").OpenCPUs == n {
				return true
			}
		}
		return false
	}
	if !awaitOpen(len(online)) {
		t.Fatalf("the first cycle did not open the group on the %d CPUs online", len(online))
	}
	write := func(v string, open int) {
		t.Helper()
		cycles := e.Cycles()
		if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if !awaitOpen(open) {
			t.Fatalf("CPU %d online=%s: the group is open on %d CPUs after 10 s, want %d (cycles %d → %d)", last, v, group(t, e.Snapshot(), "clock").OpenCPUs, open, cycles, e.Cycles())
		}
	}
	// A round in which another process hotplugged a CPU while the test's
	// was online is done again (five at most).
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatalf("another process hotplugged CPUs during %d rounds", round)
		}
		testenv.AwaitPresentOnline(t, 5*time.Second)
		awaitOpen(len(online))
		write("0", len(online)-1)
		counted := find(t, e.Snapshot(), "cpu-clock").PerCPU[last]
		set := time.Now()
		write("1", len(online))
		seen := time.Now()
		w := hotplugtest.Start(t)
		time.Sleep(200 * time.Millisecond)
		if w.Saw(t, fmt.Sprintf("round %d again", round)) {
			continue
		}
		offlining := time.Now()
		write("0", len(online)-1)
		offline := time.Now()
		// Read at the offline, one member at a time (the kernel broke the
		// group up): the time from its open at the uevent to the offline.
		got := time.Duration(find(t, e.Snapshot(), "cpu-clock").PerCPU[last] - counted)
		if most, least := offline.Sub(set), offlining.Sub(seen); got > most || got < least*95/100 {
			t.Errorf("CPU %d counted %v of cpu-clock while online; it was %v to %v", last, got, least, most)
		}
		return
	}
}

func itoa(i int) string { return string(rune('0' + i/10%10))[:min(1, i/10)] + string(rune('0'+i%10)) }

func TestGroupCPUsIntersect(t *testing.T) {
	g := GroupSpec{Events: []eventspec.Event{{CPUs: []int{0, 1, 2, 3}}, {}, {CPUs: []int{2, 3, 4}}}}
	if got := g.CPUs(); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("CPUs = %v", got)
	}
	if got := (GroupSpec{Events: []eventspec.Event{{}}}).CPUs(); got != nil {
		t.Errorf("unrestricted group CPUs = %v", got)
	}
}

// TestEngineSplitsGroupThatDoesNotFit emulates a PMU with three counters: opening
// more than three events as one group fails the way x86's group validation does.
// The events are real software events; none of them may be dropped.
func TestEngineSplitsGroupThatDoesNotFit(t *testing.T) {
	testenv.RequireRoot(t)
	threeCounters := func(attrs []eventspec.Attr, names []string, tg perf.Target) (*perf.Group, error) {
		if len(attrs) > 3 {
			return nil, &model.OpenError{Event: names[len(names)-1], CPU: tg.CPU, Err: unix.EINVAL, Reason: model.ReasonGroupDoesNotFit, GroupSize: len(attrs)}
		}
		return perf.OpenGroup(attrs, names, tg)
	}
	// Judged on a run no other process hotplugged a CPU in.
	var s Snapshot
	var online []int
	hotplugtest.Measure(t, func(int) {
		online, _ = host.OnlineCPUs("/sys")
		e := New(Options{
			Groups: []GroupSpec{{Name: "big", Events: []eventspec.Event{
				sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK), sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK),
				sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS), sw("context-switches", unix.PERF_COUNT_SW_CONTEXT_SWITCHES)}}},
			OnlineCPUs: realOnline(t),
			Open:       threeCounters,
		})
		defer e.Close()
		for i := 0; i < 3; i++ {
			e.Cycle()
			time.Sleep(10 * time.Millisecond)
		}
		s = e.Snapshot()
	})
	big := group(t, s, "big")
	if !big.Split || big.Failures[model.ReasonGroupDoesNotFit] != len(online) || big.OpenCPUs != 0 {
		t.Errorf("big group = %+v; want split and reported as not fitting on every CPU", big)
	}
	for _, name := range []string{"cpu-clock", "task-clock", "page-faults", "context-switches"} {
		g := group(t, s, "big/"+name)
		if g.OpenCPUs != len(online) {
			t.Errorf("%s counted on %d CPUs", g.Name, g.OpenCPUs)
		}
		n := 0
		for _, ev := range s.Events {
			if ev.Event == name {
				n++
			}
		}
		if n != 1 {
			t.Errorf("event %s appears %d times in the snapshot, want once", name, n)
		}
	}
	if cc := find(t, s, "cpu-clock").Sum(); cc < uint64(15*time.Millisecond) {
		t.Errorf("split cpu-clock counted only %v", time.Duration(cc))
	}
}

// OnOpen sees every group opened on every CPU, with fds that count; OnClose
// sees each before its fds close.
func TestEngineOpenCloseHooks(t *testing.T) {
	testenv.RequireRoot(t)
	online := testenv.OnlineCPUs(t)
	opened, closed := map[int]int{}, map[int]int{}
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}}},
		OnlineCPUs: realOnline(t),
		OnOpen: func(group string, events []string, cpu int, g *perf.Group) {
			if group != "clock" || g.CPU != cpu || !slices.Equal(events, []string{"cpu-clock"}) {
				t.Errorf("OnOpen(%s, %d) for a group on CPU %d", group, cpu, g.CPU)
			}
			opened[cpu] = g.FD(0)
		},
		OnClose: func(group string, events []string, cpu int, g *perf.Group) {
			// Still open: the kernel answers for the fd, and it has counted.
			if _, _, err := g.Read(make([]uint64, g.Len())); err != nil {
				t.Errorf("OnClose(%s, %d): fd %d already unusable: %v", group, cpu, g.FD(0), err)
			}
			closed[cpu] = g.FD(0)
		},
	})
	e.Cycle()
	if len(opened) != len(online) {
		t.Errorf("opened on %v, online %v", opened, online)
	}
	e.Close()
	if !maps.Equal(opened, closed) {
		t.Errorf("closed %v, opened %v", closed, opened)
	}
	for _, fd := range closed {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			t.Errorf("fd %d still open after Close", fd)
		}
	}
}

// hotplugCtl is the sysfs switch of the last online CPU, restored to online
// when the test ends.
func hotplugCtl(t *testing.T) (cpu int, toggle func()) {
	t.Helper()
	cpu, ctl := testenv.HotplugCPU(t)
	return cpu, func() {
		t.Helper()
		for _, v := range []string{"0", "1"} {
			if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
				t.Fatalf("CPU %d online=%s: %v", cpu, v, err)
			}
		}
	}
}

// TestEngineQuickHotplug takes a CPU offline and back between two cycles,
// 20 times, through sysfs: the online list is the same at every cycle, and
// the kernel detaches the old events, which read fine but no longer count.
// Each time the engine must notice, reopen the CPU's groups, tell
// OnCPUReset, and count again from the reopening: the first interval after
// it that ends without another reopening counts the CPU's time. The kernel
// detaches the events some tens of milliseconds after the write, later
// under load, so the test cycles (every 20 ms, two seconds at most) until
// the engine has reopened, rather than assuming it did at the first cycle.
// No CPU's clock may total more than the wall time that passed (nothing
// invented).
func TestEngineQuickHotplug(t *testing.T) {
	cpu, toggle := hotplugCtl(t)
	var resets []int
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}}},
		OnlineCPUs: realOnline(t),
		OnCPUReset: func(c int, cause string) {
			if !strings.Contains(cause, "time_enabled stopped advancing") {
				t.Errorf("CPU %d reset for %q", c, cause)
			}
			resets = append(resets, c)
		},
	})
	defer e.Close()
	start := time.Now()
	e.Cycle()
	time.Sleep(20 * time.Millisecond)
	e.Cycle()
	clock := func() uint64 { return find(t, e.Snapshot(), "cpu-clock").PerCPU[cpu] }
	const toggles = 20
	reopened := func() uint64 { return e.Snapshot().Reopened[cpu] }
	// A neighbour's hotplug (another process taking a CPU offline) during
	// the judged interval is not the engine's doing: that toggle is not
	// judged, and one more is made.
	for i, judged := 0, 0; judged < toggles; i++ {
		if i == toggles+10 {
			t.Fatalf("another process took CPUs offline during %d of %d toggles", i-judged, i)
		}
		// Not a CPU another process holds offline, and the engine has its
		// group open there (a cycle while it was offline closed it).
		testenv.AwaitPresentOnline(t, 5*time.Second)
		e.Cycle()
		was := reopened()
		toggle()
		w := hotplugtest.Start(t)
		neighbour := func() bool { return w.Saw(t, fmt.Sprintf("toggle %d again", i)) }
		cycles := 0
		for deadline := time.Now().Add(2 * time.Second); ; cycles++ {
			if time.Now().After(deadline) {
				if neighbour() {
					break
				}
				g := group(t, e.Snapshot(), "clock")
				t.Fatalf("toggle %d: CPU %d not counting again %d cycles after the toggle (reopened %d times before it, %d now; enabled %v, online %v); resets so far %v", i, cpu, cycles, was, reopened(), g.EnabledNS, testenv.OnlineCPUs(t), resets)
			}
			time.Sleep(20 * time.Millisecond)
			before, n := clock(), reopened()
			e.Cycle()
			if n == was || reopened() != n {
				continue // the interval began before the reopening, or ended in another
			}
			if got := clock() - before; got < uint64(10*time.Millisecond) {
				if neighbour() {
					break
				}
				g := group(t, e.Snapshot(), "clock")
				t.Fatalf("toggle %d: CPU %d counted %v in the 20ms interval after its reopening (enabled %v running %v); resets so far %v", i, cpu, time.Duration(got), g.EnabledNS, g.RunningNS, resets)
			}
			judged++
			break
		}
		w.Stop()
		if cycles > 1 {
			t.Logf("toggle %d: counting again after %d cycles", i, cycles+1)
		}
	}
	s := e.Snapshot()
	if n := s.Reopened[cpu]; n < toggles {
		t.Errorf("CPU %d reopened %d times for %d toggles", cpu, n, toggles)
	}
	if n := len(resets); n != int(s.Reopened[cpu]) || slices.ContainsFunc(resets, func(c int) bool { return c != cpu }) {
		t.Errorf("OnCPUReset heard %v; the snapshot says %v", resets, s.Reopened)
	}
	wall := uint64(time.Since(start))
	for c, v := range find(t, s, "cpu-clock").PerCPU {
		if v > wall {
			t.Errorf("CPU %d counted %v of cpu-clock in %v", c, time.Duration(v), time.Duration(wall))
		}
	}
	// Open on every online CPU, judged by a cycle during which the online
	// list stayed the same (another process may hotplug too).
	for try := 0; ; try++ {
		online := testenv.OnlineCPUs(t)
		e.Cycle()
		if !slices.Equal(online, testenv.OnlineCPUs(t)) && try < 100 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if g := group(t, e.Snapshot(), "clock"); g.OpenCPUs != len(online) {
			t.Errorf("group open on %d CPUs, %d online", g.OpenCPUs, len(online))
		}
		break
	}
}

// A CPU that stays online is never reopened, however long a cycle takes to
// come: time_enabled keeps up with the clock.
func TestEngineNoFalseReopen(t *testing.T) {
	testenv.RequireRoot(t)
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK), sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS)}}},
		OnlineCPUs: realOnline(t),
		OnCPUReset: func(c int, cause string) { t.Errorf("CPU %d reset: %s", c, cause) },
	})
	defer e.Close()
	for _, d := range []time.Duration{0, time.Millisecond, 0, 30 * time.Millisecond, 0} {
		e.Cycle()
		time.Sleep(d)
	}
	if r := e.Snapshot().Reopened; len(r) != 0 {
		t.Errorf("reopened %v", r)
	}
}

// Events that stop counting on every CPU at once (here disabled through
// their own fds, which stops time_enabled as a detach by the kernel does)
// are all found dead in one cycle, after one wait for the second look, not
// one per CPU and group; every CPU is reopened and counts again.
func TestEngineOneWaitForEveryLaggingCPU(t *testing.T) {
	testenv.RequireRoot(t)
	var (
		e       *Engine
		sleeps  int
		resets  []int
		leaders map[int][]int // per CPU, its groups' leader fds
		// What the last run saw, judged after it.
		waits   int
		reset   []int
		online  []int
		counted map[int]uint64
	)
	// A neighbour's hotplug reopens groups of its own accord: measured again.
	hotplugtest.Measure(t, func(int) {
		sleeps, resets, leaders = 0, nil, map[int][]int{}
		e = New(Options{
			Groups: []GroupSpec{
				{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}},
				{Name: "faults", Events: []eventspec.Event{sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK), sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS)}},
			},
			OnlineCPUs: realOnline(t),
			Sleep:      func(d time.Duration) { sleeps++; time.Sleep(d) },
			OnOpen:     func(_ string, _ []string, cpu int, g *perf.Group) { leaders[cpu] = append(leaders[cpu], g.FD(0)) },
			OnCPUReset: func(c int, cause string) {
				if !strings.Contains(cause, "time_enabled stopped advancing") {
					t.Errorf("CPU %d reset for %q", c, cause)
				}
				resets = append(resets, c)
			},
		})
		t.Cleanup(e.Close)
		e.Cycle()
		time.Sleep(10 * time.Millisecond)
		e.Cycle()
		for _, fds := range leaders {
			for _, fd := range fds {
				if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, unix.PERF_IOC_FLAG_GROUP); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(30 * time.Millisecond)
		e.Cycle()
		online = testenv.OnlineCPUs(t)
		waits, reset = sleeps, slices.Sorted(slices.Values(resets))
		// Counting again: what each CPU counted in the next 30 ms.
		before := find(t, e.Snapshot(), "cpu-clock")
		time.Sleep(30 * time.Millisecond)
		e.Cycle()
		after := find(t, e.Snapshot(), "cpu-clock")
		counted = map[int]uint64{}
		for _, cpu := range online {
			counted[cpu] = after.PerCPU[cpu] - before.PerCPU[cpu]
		}
	})
	if waits != 1 || !slices.Equal(reset, online) {
		t.Fatalf("%d waits (want 1), CPUs reset %v (want the online %v)", waits, reset, online)
	}
	for cpu, got := range counted {
		if got < uint64(20*time.Millisecond) {
			t.Errorf("CPU %d counted %v in the 30 ms after its reopening", cpu, time.Duration(got))
		}
	}
}

// ResetCPU reopens cgroup-mode groups too, which cannot tell a dead event
// from an idle cgroup by themselves.
func TestEngineResetCPU(t *testing.T) {
	testenv.RequireRoot(t)
	online := testenv.OnlineCPUs(t)
	opened := map[int]int{}
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}}},
		OnlineCPUs: realOnline(t),
		OnOpen:     func(_ string, _ []string, cpu int, _ *perf.Group) { opened[cpu]++ },
	})
	defer e.Close()
	e.Cycle()
	e.ResetCPU(online[0], "test")
	e.Cycle()
	e.Cycle()
	if opened[online[0]] != 2 || e.Snapshot().Reopened[online[0]] != 1 {
		t.Errorf("opened %v, reopened %v", opened, e.Snapshot().Reopened)
	}
	for _, c := range online[1:] {
		if opened[c] != 1 {
			t.Errorf("CPU %d opened %d times", c, opened[c])
		}
	}
}

// A CPU coming online under load can refuse an open for a moment (ENODEV):
// the group is tried again at the next cycle, not a minute later; repeated
// failures back off.
func TestEngineRetriesNoDeviceAtOnce(t *testing.T) {
	testenv.RequireRoot(t)
	online := testenv.OnlineCPUs(t)
	refuse := 1
	now := time.Unix(1000, 0)
	e := New(Options{
		Groups:     []GroupSpec{{Name: "clock", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}}},
		OnlineCPUs: realOnline(t),
		Now:        func() time.Time { return now },
		Open: func(attrs []eventspec.Attr, names []string, tg perf.Target) (*perf.Group, error) {
			if tg.CPU == online[0] && refuse > 0 {
				refuse--
				return nil, &model.OpenError{Event: names[0], CPU: tg.CPU, Err: unix.ENODEV, Reason: model.ReasonNoDevice}
			}
			return perf.OpenGroup(attrs, names, tg)
		},
	})
	defer e.Close()
	e.Cycle()
	if g := group(t, e.Snapshot(), "clock"); g.OpenCPUs != len(online)-1 || g.Failures[model.ReasonNoDevice] != 1 {
		t.Fatalf("after a refused open: %+v", g)
	}
	e.Cycle() // no time has passed
	if g := group(t, e.Snapshot(), "clock"); g.OpenCPUs != len(online) {
		t.Errorf("not retried at the next cycle: %+v", g)
	}
	if d := []time.Duration{e.retryDelay(0), e.retryDelay(1), e.retryDelay(3), e.retryDelay(40)}; d[0] != 0 || d[1] != time.Second || d[2] != 4*time.Second || d[3] != time.Minute {
		t.Errorf("retry delays %v", d)
	}
}
