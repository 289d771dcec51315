package feed

import (
	"math"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/groundtruth/accesses"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfsample"
	"github.com/pmu-exporter/pmu_exporter/kernel/watch"
	"github.com/pmu-exporter/pmu_exporter/model"
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
	e, d := engineAndDecoder(t, 1, 1)
	if err := d.WatchReuse(e, 1, 0, reuse.Shared, ""); err != nil {
		t.Fatal(err)
	}
	pid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	if err := d.SetWatched(pid, []uint32{tid}, model.RegistersReuse); err != nil {
		t.Fatal(err)
	}
	d.threadCPU[tid] = 1
	if n := len(e.Threads()); n != 1 {
		t.Fatalf("%d threads with events, want 1", n)
	}
	d.Exited(pid)
	comm, reused := d.WatchedThreads()
	if n := len(e.Threads()); n != 0 || len(d.threadCPU) != 0 || comm+reused != 0 {
		t.Errorf("after the exit: %d threads with events, %d with a last CPU, %d+%d watched; want none", n, len(d.threadCPU), comm, reused)
	}
}

// One engine serves both algorithms, each process by its use: a thread
// watched for the trap path is not sampled by its leader; switched to
// ReuseTracker, its events are reopened with a sampling leader and its
// samples go to its process's tracker; switched back, the tracker's
// totals stay with its cgroup's (processes gone) and the process has none.
func TestSetWatchedSwitchesUse(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireFeature(t, hostgate.Watchpoints) // it judges runs by their traps
	// Every register a slot: a slot armed on what a sample outside the
	// store loop touched (the clock's reads; more of them under the race
	// detector) traps on nothing, and the reservoir keeps the first
	// samples armed; with four, one of them is the variable's.
	slots, err := watch.Slots(4)
	if err != nil {
		t.Fatal(err)
	}
	e, d := engineAndDecoder(t, slots, 64)
	if err := e.SampleEvery(uint64(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := d.Watch(e, slots); err != nil {
		t.Fatal(err)
	}
	if err := d.WatchReuse(e, slots, 0, reuse.Private, ""); err != nil {
		t.Fatal(err)
	}
	pid := uint32(os.Getpid())
	tids := make(chan uint32)
	jobs := make(chan bool)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		tids <- uint32(unix.Gettid())
		for range jobs {
			for start := threadNS(); threadNS()-start < 30e6; {
				accesses.StoreLoop(&switchedVar, 1<<12)
			}
			done <- struct{}{}
		}
	}()
	defer close(jobs)
	tid := <-tids
	run := func() { jobs <- true; <-done; d.ReadTraps(1) }
	samples := func() (live, gone uint64) {
		d.ReuseView(func(p uint32, _ uint64, tr *reuse.Tracker) {
			if p == 0 {
				gone += tr.Samples
			} else {
				live += tr.Samples
			}
		})
		return live, gone
	}
	if err := d.SetWatched(pid, []uint32{tid}, model.RegistersComm); err != nil {
		t.Fatal(err)
	}
	run()
	if live, gone := samples(); live+gone != 0 {
		t.Fatalf("watched for the trap path: %d samples went to a tracker", live+gone)
	}
	if err := d.SetWatched(pid, []uint32{tid}, model.RegistersReuse); err != nil {
		t.Fatal(err)
	}
	run()
	if comm, reused := d.WatchedThreads(); comm != 0 || reused != 1 {
		t.Errorf("%d threads watched on the trap path, %d for reuse; want the one for reuse", comm, reused)
	}
	// The slots armed at a run's samples trap on the next run's stores.
	// The first run after the switch gives its tracker 0 to 4 samples
	// where the next give 6 to 23: nothing is armed in it yet, so its
	// samples fall anywhere in the store loop, and most land after an
	// instruction with no memory operand (19 to 24 of about 25, counted);
	// in a run that traps they land after the trapping store. With none,
	// nothing is armed for the next run, so runs go on until one traps,
	// five at most.
	for range 5 {
		run()
		if d.WatchStats().Traps > 0 {
			break
		}
	}
	live, _ := samples()
	if live == 0 {
		t.Fatalf("watched for reuse, 30 ms of the thread's CPU time sampled every ms: no sample reached its tracker")
	}
	if w := d.WatchStats(); w.Reuse == 0 || w.Reuse != w.Traps || w.Communication != 0 {
		t.Errorf("watch totals %+v: want every trap ReuseTracker's, some", w)
	}
	if err := d.SetWatched(pid, []uint32{tid}, model.RegistersComm); err != nil {
		t.Fatal(err)
	}
	if l, g := samples(); l != 0 || g != live {
		t.Errorf("back on the trap path: %d samples with a live tracker, %d kept with the cgroup; want 0 and %d", l, g, live)
	}
	if comm, reused := d.WatchedThreads(); comm != 1 || reused != 0 || len(e.Threads()) != 1 {
		t.Errorf("%d threads watched on the trap path, %d for reuse, %d with events; want the one on the trap path", comm, reused, len(e.Threads()))
	}
}

// switchedVar is what TestSetWatchedSwitchesUse's thread stores to: a
// package variable, which stays where one run's samples saw it for the
// next (a goroutine's stack may move in between).
var switchedVar uint64

// threadNS is the calling thread's CPU time.
func threadNS() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// A thread of a watched process that the lists have not named yet gets its
// events at its first sample, up to the limit; one that has exited by the
// time its sample is read gets none, and no error stops the others.
func TestSampledThreadsJoin(t *testing.T) {
	testenv.RequireRoot(t)
	e, d := engineAndDecoder(t, 1, 1)
	if err := d.Watch(e, 1); err != nil {
		t.Fatal(err)
	}
	d.WatchNewThreads(2)
	live := func() (uint32, func()) {
		tids, stop := make(chan uint32), make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- uint32(unix.Gettid())
			<-stop
		}()
		return <-tids, func() { close(stop) }
	}
	pid := uint32(os.Getpid())
	a, stopA := live()
	defer stopA()
	b, stopB := live()
	defer stopB()
	c, stopC := live()
	defer stopC()
	gone := testenv.ExitedThread(t)
	if err := d.SetWatched(pid, []uint32{a}, model.RegistersComm); err != nil {
		t.Fatal(err)
	}
	stats := samplestat.New(1, 64)
	batch := stats.Lock()
	for i, tid := range []uint32{gone, b, c} { // c comes after the limit is reached
		d.queue(memaccess.Access{PID: pid, TID: tid, Addr: 0x1000 + 64*uint64(i), Size: 8, Store: true, Time: uint64(i + 1), Period: 1}, &perfrecord.Sample{}, 0, true)
	}
	d.flush(batch, math.MaxUint64)
	batch.Unlock()
	if !e.Watching(a) || !e.Watching(b) || e.Watching(c) || e.Watching(gone) {
		t.Errorf("events in a %v, b %v, c %v, the exited thread %v; want a (listed) and b (sampled) only", e.Watching(a), e.Watching(b), e.Watching(c), e.Watching(gone))
	}
	if w := d.WatchStats(); w.Joined != 1 {
		t.Errorf("%d threads joined at a sample, want 1", w.Joined)
	}
	// The next listing without b (it exited) closes its events.
	if err := d.SetWatched(pid, []uint32{a}, model.RegistersComm); err != nil {
		t.Fatal(err)
	}
	if comm, _ := d.WatchedThreads(); comm != 1 || e.Watching(b) {
		t.Errorf("%d threads watched after b left the list (b has events: %v)", comm, e.Watching(b))
	}
}

// engineAndDecoder is a watchpoint engine (slots per thread, rings of pages)
// closed when the test ends, and a decoder reading /proc, not yet given it.
func engineAndDecoder(t *testing.T, slots, pages int) (*watch.Engine, *Decoder) {
	t.Helper()
	e, err := watch.New(slots, pages)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, procDecoder(t, comdetect.New(comdetect.Options{}))
}

// A process that exits with watches armed ends them (ReuseTracker's
// Ended), aged on their owner's CPU time as its task-clock leader counted
// it to the end: they join its cgroup's totals of processes gone, not
// dropped. Here the "process" is this one, forgotten as if it exited.
func TestExitEndsArmedWatches(t *testing.T) {
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e, d := engineAndDecoder(t, 1, 1)
	if err := e.SampleEvery(uint64(time.Second)); err != nil { // a leader per thread: its CPU time is the clock
		t.Fatal(err)
	}
	if err := d.WatchReuse(e, 1, 0, reuse.Private, ""); err != nil {
		t.Fatal(err)
	}
	pid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	if err := d.SetWatched(pid, []uint32{tid}, model.RegistersReuse); err != nil {
		t.Fatal(err)
	}
	var word uint64
	armed := func() uint64 {
		ns, err := e.Clock(tid)
		if err != nil {
			t.Fatal(err)
		}
		return d.reuseClock(ns)
	}()
	d.mu.Lock()
	tr := d.tracker(pid)
	if !tr.Sample(reuse.Use{TID: tid, Addr: uint64(uintptr(unsafe.Pointer(&word))), Size: 8, Kind: reuse.Write, Clock: armed}) {
		d.mu.Unlock()
		t.Fatal("the sample took no slot")
	}
	d.mu.Unlock()
	for i := 0; i < 1e7; i++ { // some CPU time of this thread after the arm
		word += uint64(i)
	}
	d.Exited(pid)
	d.mu.Lock()
	defer d.mu.Unlock()
	gone := d.reuseGone[0]
	if gone == nil || gone.Life.Watches(reuse.Ended) != 1 {
		t.Fatalf("after the exit: the totals of processes gone %v, want the armed watch ended", gone)
	}
	if e := gone.Estimate(); e.Ended.Share != 1 || e.Horizon == 0 {
		t.Errorf("the ended watch: share %v, age %d; want all of the one watch, aged by the CPU time the loop took", e.Ended.Share, e.Horizon)
	}
}

// procDecoder is a decoder reading the processes under /proc, feeding det.
func procDecoder(t testing.TB, det *comdetect.Detector) *Decoder {
	t.Helper()
	procs, err := perfsample.NewProcesses("/proc")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(procs, perfsample.MonotonicNow, det)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
