package hotplugtest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// A CPU taken offline and back, or brought online, during the watch is the
// one Offlined names; a watch over which nothing happened names none.
func TestWatchSeesHotplug(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	set := func(v string) {
		t.Helper()
		if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
			t.Fatalf("CPU %d online=%s: %v", cpu, v, err)
		}
	}
	// A neighbour's hotplug may fall in one quiet window, not in three.
	var named []int
	for range 3 {
		testenv.AwaitPresentOnline(t, 5*time.Second)
		w := Start(t)
		time.Sleep(20 * time.Millisecond)
		got := w.Offlined(t)
		w.Stop()
		if got == -1 {
			named = nil
			break
		}
		named = append(named, got)
	}
	if named != nil {
		t.Errorf("three 20 ms watches over which this test hotplugged nothing named CPUs %v", named)
	}
	w := Start(t)
	set("0")
	set("1")
	if got := w.Offlined(t); got != cpu {
		t.Errorf("CPU %d went offline and back: Offlined says %d", cpu, got)
	}
	w.Stop()

	set("0")
	w = Start(t)
	set("1")
	if got := w.Offlined(t); got != cpu {
		t.Errorf("CPU %d came online: Offlined says %d", cpu, got)
	}
	w.Stop()

	// Offline when the watch began and still offline: in neither the
	// online list nor the watch, yet not what a test's run expected.
	set("0")
	w = Start(t)
	got := w.Offlined(t)
	set("1")
	if got != cpu {
		t.Errorf("CPU %d offline throughout: Offlined says %d", cpu, got)
	}
}

// Where perf's cgroup events are open on a CPU, each cgroup switch there
// keeps the CPU's perf context scheduled out for a moment, and the watch's
// dummy event's enabled time falls behind the wall clock without the CPU
// going anywhere. Offlined must not take that for a hotplug: a CPU that
// cannot be hotplugged at all, made to switch cgroups tens of thousands of
// times under cgroup events until its watch lags by 20 ms, is never named.
func TestWatchBesideCgroupSwitches(t *testing.T) {
	_, dirs := testenv.Cgroups(t, "a")
	fixed := -1
	for _, cpu := range testenv.OnlineCPUs(t) {
		if _, err := os.Stat(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)); os.IsNotExist(err) {
			fixed = cpu
			break
		}
	}
	testenv.Require(t, fixed >= 0, "needs a CPU that cannot be hotplugged (x86's CPU 0): one whose watch must stay quiet")
	cg, err := os.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	for _, cpu := range testenv.OnlineCPUs(t) {
		g, err := perf.OpenGroup([]eventspec.Attr{{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}},
			[]string{"cpu-clock"}, perf.Target{CPU: cpu, CgroupFD: int(cg.Fd())})
		if errors.Is(err, unix.ENODEV) {
			continue // another process took it offline: the fixed CPU is what counts
		}
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
	}

	// A byte bounced between this thread and cat in cgroup a, both on the
	// fixed CPU (cat inherits the forking thread's affinity): two cgroup
	// switches there a round trip.
	// Left locked: the runtime ends the thread with its goroutine, rather
	// than hand its narrowed affinity to other goroutines.
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(fixed)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	cat := exec.Command("cat")
	cat.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	in, err := cat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cat.Wait() }()

	// Until the watch lags by four times Offlined's slack, or 5 s.
	w := Start(t)
	b := make([]byte, 1)
	var lag time.Duration
	trips := 0
	for ; lag < 20*time.Millisecond && time.Since(w.start) < 5*time.Second; trips += 1000 {
		for range 1000 {
			if _, err := in.Write(b); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(out, b); err != nil {
				t.Fatal(err)
			}
		}
		lag = time.Since(w.start) - time.Duration(w.enabled(t, fixed))
	}
	t.Logf("CPU %d's watch fell %v behind the wall clock in %d cgroup switches", fixed, lag, 2*trips)
	testenv.Require(t, lag >= 20*time.Millisecond, fmt.Sprintf("the kernel kept CPU %d's perf time within %v of the wall clock across cgroup switches: not the case this test is for", fixed, lag))
	if got := w.Offlined(t); got == fixed {
		t.Errorf("Offlined names CPU %d, which cannot be hotplugged", fixed)
	}
}
