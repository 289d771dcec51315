package perfsample

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/watch"
	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/comm/reuse"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// The totals of exited processes are forgotten with their cgroup, except
// where a watched process still reports that cgroup (it moved out before
// the cgroup was removed): forgetting them would make its counters go down.
func TestForgetReuseCgroups(t *testing.T) {
	gone := func(samples uint64) *reuse.Tracker {
		tr := reuse.New(nil, reuse.Options{})
		tr.Samples = samples
		return tr
	}
	d := &Decoder{
		trackers:    map[uint32]*reuse.Tracker{7: gone(1)},
		reuseCgroup: map[uint32]uint64{7: 30},
		reuseGone:   map[uint64]*reuse.Tracker{10: gone(5), 20: gone(6), 30: gone(7)},
	}
	d.ForgetReuseCgroups([]uint64{10, 30, 99})
	seen := map[uint64]uint64{}
	d.ReuseView(func(pid uint32, cg uint64, t *reuse.Tracker) {
		if pid == 0 {
			seen[cg] = t.Samples
		}
	})
	if len(seen) != 2 || seen[20] != 6 || seen[30] != 7 {
		t.Errorf("totals of processes gone after forgetting cgroups 10, 30 and 99: %v, want 20 (6 samples) and 30 (7: pid 7 still reports it)", seen)
	}
	ids := d.ReuseCgroupIDs()
	if len(ids) != 2 {
		t.Errorf("ReuseCgroupIDs %v, want 20 and 30", ids)
	}
}

// A watched process that exits leaves nothing behind in the decoder: its
// threads' events are closed, and where its threads were last seen (kept
// for the cache domains of shared-mode reuse) is forgotten with them.
func TestExitedForgetsWatchedThreads(t *testing.T) {
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e, err := watch.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d, err := NewDecoder("/proc", comdetect.New(comdetect.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WatchReuse(e, 1, reuse.Shared, ""); err != nil {
		t.Fatal(err)
	}
	pid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	if err := d.SetWatched(pid, []uint32{tid}); err != nil {
		t.Fatal(err)
	}
	d.threadCPU[tid] = 1
	if n := len(e.Threads()); n != 1 {
		t.Fatalf("%d threads with events, want 1", n)
	}
	d.Exited(pid)
	if n := len(e.Threads()); n != 0 || len(d.threadCPU) != 0 || d.WatchedThreads() != 0 {
		t.Errorf("after the exit: %d threads with events, %d with a last CPU, %d watched; want none", n, len(d.threadCPU), d.WatchedThreads())
	}
}
