package cgroupcount

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/cgroupattr"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// rig is an engine counting cpu-clock and task-clock with an attributor on it.
type rig struct {
	e    *perfcount.Engine
	a    *attribution
	now  time.Time
	cpus []int
}

func newRig(t testing.TB, opts Options, series cgroupattr.Options) *rig {
	t.Helper()
	groups := []perfcount.GroupSpec{{Name: "software", Events: []eventspec.Event{
		sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK), sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK)}}}
	opts.Classes, _ = Plan([]Class{{}}, groups, func(string) bool { return true }, func(string) bool { return true })
	r := &rig{now: time.Unix(1000, 0), cpus: testenv.OnlineCPUs(t)}
	opts.Root, opts.Now = testenv.Cgroup2Mount(), func() time.Time { return r.now }
	k, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	a := withAnalysis(k, nil, series)
	online := host.NewOnlineCPUsReader("/sys")
	r.a = a
	r.e = perfcount.New(perfcount.Options{Groups: groups, OnlineCPUs: online.Read, OnOpen: a.OnOpen, OnClose: a.OnClose})
	t.Cleanup(func() {
		r.e.Close()
		a.Close()
		online.Close()
	})
	return r
}

func (r *rig) cycle(d time.Duration) {
	r.e.Cycle()
	r.a.Cycle(r.cpus)
	r.now = r.now.Add(d)
}

// kernelEntries counts the kernel map's cgroups.
func (r *rig) kernelEntries(t testing.TB) int {
	n := 0
	if err := r.a.counter.Read(func(uint64, [][]cgroupbpf.Reading) { n++ }); err != nil {
		t.Fatal(err)
	}
	return n
}

// settledFDs counts the open fds after a cycle while every present CPU is
// online: the engine closes a CPU's groups while it is offline (another
// process's hotplug) and opens them again at the first cycle after.
func (r *rig) settledFDs(t testing.TB) (n int) {
	testenv.EveryCPUOnline(t, func() {
		r.cycle(0)
		n = openFDs(t)
	})
	return n
}

func openFDs(t testing.TB) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// runIn runs true(1) directly inside each of dirs, so that each cgroup is
// switched into and out of once.
func runIn(t testing.TB, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("true")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
		err = cmd.Run()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestChurn creates and removes thousands of cgroups that each ran a task:
// the kernel map, the series and the file descriptors all come back to where
// they were; series stay bounded throughout.
func TestChurn(t *testing.T) {
	const n, maxSeries = 2000, 50
	testenv.RequireRoot(t)
	top, _ := testenv.Cgroups(t)
	var mine, fds, fdsAfter int
	// A CPU another process takes offline and back is attached again at
	// the next cycle: what ran there until then is nobody's, and the fds
	// counted before and after differ by its events. Measure again then,
	// with a rig and cgroups of the run's own.
	hotplugtest.Measure(t, func(try int) {
		r := newRig(t, Options{Depth: 2, MaxCgroups: 8192, Rescan: 10 * time.Second}, cgroupattr.Options{MaxSeries: maxSeries, Grace: 5 * time.Second})
		r.cycle(time.Second)
		base := filepath.Join(testenv.Cgroup2Mount(), top, fmt.Sprintf("run%d", try))
		if err := os.Mkdir(base, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(base)
		r.cycle(time.Second)
		fds = r.settledFDs(t)
		before := r.kernelEntries(t)

		var dirs []string
		for i := range n {
			d := filepath.Join(base, fmt.Sprintf("c%04d", i))
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		}
		defer func() {
			for _, d := range dirs {
				os.Remove(d)
			}
		}()
		for i := 0; i < n; i += 250 {
			runIn(t, dirs[i:i+250])
			r.cycle(time.Second)
			// The bound, and other; and gone, where a cgroup of the busy
			// machine came and went within the cycle (a series the design
			// has besides the bound).
			if s := r.a.Snapshot(); len(s.Cgroups) > maxSeries+2 || len(s.Cgroups) == maxSeries+2 && !slices.ContainsFunc(s.Cgroups, func(c Cgroup) bool { return c.Path == cgroupattr.Gone }) {
				t.Fatalf("%d series, bound %d + other (+ gone)", len(s.Cgroups), maxSeries)
			}
		}
		during := r.kernelEntries(t)
		s := r.a.Snapshot()
		// Each of the test's cgroups whose task ran is in the map (other
		// cgroups of a busy machine come and go beside them: only these
		// are counted). A switch the program did not see leaves its task's
		// time unattributed (see cgroupbpf); a few of the 2000 are allowed
		// for that.
		ids := map[uint64]bool{}
		for _, d := range dirs {
			id, err := cgroupid.ID(d)
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = true
		}
		mine = 0
		r.a.counter.Read(func(id uint64, _ [][]cgroupbpf.Reading) {
			if ids[id] {
				mine++
			}
		})
		t.Logf("%d of %d cgroups attributed (%d entries before, %d now); %d switches missed", mine, n, before, during, s.Switches.SwitchesMissed)
		if s.Errors[model.CgroupErrMapFull] != 0 || s.Tracked != during {
			t.Errorf("map full %d, tracked %d, kernel entries %d", s.Errors[model.CgroupErrMapFull], s.Tracked, during)
		}

		for _, d := range dirs {
			if err := os.Remove(d); err != nil {
				t.Fatal(err)
			}
		}
		dirs = nil
		r.now = r.now.Add(10 * time.Second) // the rescan is due: the walk finds them gone
		r.cycle(time.Second)
		left := 0
		r.a.counter.Read(func(id uint64, _ [][]cgroupbpf.Reading) {
			if ids[id] {
				left++
			}
		})
		if left > 0 {
			t.Errorf("the kernel map still holds %d of the %d removed cgroups", left, n)
		}
		r.now = r.now.Add(6 * time.Second) // past the grace period
		r.cycle(time.Second)
		for _, c := range r.a.Snapshot().Cgroups {
			if strings.HasPrefix(c.Path, fmt.Sprintf("%s/run%d/c", top, try)) {
				t.Fatalf("removed cgroup %s still has series", c.Path)
			}
		}
		fdsAfter = r.settledFDs(t)
	})
	if mine < n*97/100 {
		t.Errorf("kernel map holds %d of the %d cgroups that ran", mine, n)
	}
	if fdsAfter != fds {
		t.Errorf("%d open fds after the churn, %d before", fdsAfter, fds)
	}
}

// TestMapFull: a kernel map smaller than the cgroups that run loses credits,
// counts them, and keeps attributing the cgroups it holds.
func TestMapFull(t *testing.T) {
	testenv.RequireRoot(t)
	r := newRig(t, Options{Depth: 1, MaxCgroups: 8}, cgroupattr.Options{MaxSeries: 100, Grace: time.Minute})
	r.cycle(time.Second)
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprint(i))
	}
	// 40 cgroups: enough that more than 8 are seen although the kernel skips
	// the program for some switches.
	_, dirs := testenv.Cgroups(t, names...)
	runIn(t, dirs)
	r.cycle(time.Second)
	s := r.a.Snapshot()
	if s.Errors[model.CgroupErrMapFull] == 0 || s.Tracked > 8 {
		t.Errorf("40 cgroups in a map of 8: map_full %d, tracked %d", s.Errors[model.CgroupErrMapFull], s.Tracked)
	}
	if len(s.Cgroups) == 0 || s.Cgroups[0].Path == cgroupattr.Other {
		t.Errorf("nothing attributed with a full map: %+v", s.Cgroups)
	}
}

// A walk that fails (an unreadable hierarchy) does not make the attributor
// forget the cgroups it could not resolve: their counts stay in the kernel's
// map, and are resolved once the hierarchy can be read again.
func TestFailedWalkForgetsNothing(t *testing.T) {
	_, dirs := testenv.Cgroups(t, "kept")
	r := newRig(t, Options{Depth: 1, MaxCgroups: 1024}, cgroupattr.Options{MaxSeries: 100, Grace: time.Minute})
	r.cycle(time.Second)
	id, err := cgroupid.ID(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	inMap := func() bool {
		found := false
		r.a.counter.Read(func(got uint64, _ [][]cgroupbpf.Reading) { found = found || got == id })
		return found
	}
	resolver := r.a.resolver
	r.a.resolver = cgroupid.New(filepath.Join(t.TempDir(), "gone")) // every walk fails
	for round := 0; !inMap() && round < 20; round++ {
		runIn(t, dirs)
	}
	if !inMap() {
		t.Fatal("the test cgroup never reached the kernel map")
	}
	r.cycle(time.Second) // an unknown id: a walk, which fails
	if r.a.errors[model.CgroupErrWalk] == 0 {
		t.Fatal("the walk did not fail")
	}
	if !inMap() {
		t.Fatal("after a failed walk the cgroup was dropped from the kernel map, and its counts with it")
	}
	r.a.resolver = resolver
	r.cycle(time.Second)
	for _, s := range r.a.Snapshot().Cgroups {
		if strings.HasSuffix(s.Path, "/kept") {
			return
		}
	}
	t.Errorf("the cgroup has no series once the hierarchy reads again: %+v", r.a.Snapshot().Cgroups)
}

// An attributed event whose group never opens (a software event id the
// kernel does not have) gets no per-cgroup series, where a zero would read
// as "counted nothing"; the events that count keep theirs.
func TestUnopenedEventHasNoSeries(t *testing.T) {
	testenv.RequireRoot(t)
	groups := []perfcount.GroupSpec{
		{Name: "software", Events: []eventspec.Event{sw("cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK)}},
		{Name: "missing", Events: []eventspec.Event{sw("no-such-event", 0xdead)}},
	}
	classes, _ := Plan([]Class{{}}, groups, func(string) bool { return true }, func(string) bool { return true })
	now := time.Unix(1000, 0)
	k, err := New(Options{Classes: classes, Root: testenv.Cgroup2Mount(), MaxCgroups: 4096,
		Now: func() time.Time { return now }})
	testenv.Require(t, err == nil, fmt.Sprintf("loading the BPF program: %v", err))
	a := withAnalysis(k, nil, cgroupattr.Options{MaxSeries: 1000, Grace: time.Minute})
	online := host.NewOnlineCPUsReader("/sys")
	defer online.Close()
	e := perfcount.New(perfcount.Options{Groups: groups, OnlineCPUs: online.Read, OnOpen: a.OnOpen, OnClose: a.OnClose})
	defer func() { e.Close(); a.Close() }()
	cpus := testenv.OnlineCPUs(t)
	for range 3 {
		e.Cycle()
		a.Cycle(cpus)
		now = now.Add(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	s := a.Snapshot()
	if len(s.Cgroups) == 0 {
		t.Fatal("no cgroup series at all")
	}
	for _, c := range s.Cgroups {
		names := map[string]bool{}
		for _, ev := range c.Events {
			names[ev.Event] = true
		}
		if names["no-such-event"] || !names["cpu-clock"] {
			t.Errorf("%s: series for %v, want cpu-clock and not no-such-event", c.Path, c.Events)
		}
	}
}
