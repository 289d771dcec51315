// Package watch arms hardware watchpoints in other processes' threads with
// perf breakpoint events, as a DaemonSet must (from outside, no
// LD_PRELOAD): per target thread a task-clock leader and one breakpoint
// event per debug register, sampling every trap with the group's values
// (PERF_SAMPLE_READ: the thread's CPU time at the trap, or the counts of
// the events CountWith adds to the group: the distance clock) into one
// ring per thread, the leader's. With SampleEvery the leader samples the
// thread too, every period of its CPU time, into the same ring: samples
// and traps on one clock, the thread's own. An arm is good for one trap,
// which the kernel ends (PERF_EVENT_IOC_REFRESH 1); re-arming re-targets
// an open event with PERF_EVENT_IOC_MODIFY_ATTRIBUTES, and reopens only a
// breakpoint whose trap came (see Arm). All perf_event_open and ioctl
// calls go through kernel/perf.
package watch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
)

// HW_BREAKPOINT_* types (linux/hw_breakpoint.h).
const (
	bpW  = 2
	bpRW = 3
)

const (
	// A trap records who, where and when, the group's values (the distance
	// clock) and the user registers, with which the trapping instruction's
	// exact access is decoded.
	sampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
		unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_READ | unix.PERF_SAMPLE_REGS_USER
	readFormat = unix.PERF_FORMAT_GROUP | unix.PERF_FORMAT_ID
)

// Slots asks the kernel how many watchpoints one thread can hold: it opens
// disabled breakpoints on the calling thread until the kernel refuses one
// (ENOSPC), at most max.
func Slots(max int) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var v uint64
	var fds []int
	defer func() {
		for _, fd := range fds {
			perf.CloseFD(fd)
		}
	}()
	for len(fds) < max {
		a := breakpoint(uint64(uintptr(unsafe.Pointer(&v))), 8, false)
		fd, err := perf.OpenFD(&a, 0, -1, -1, 0)
		if errors.Is(err, unix.ENOSPC) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("breakpoint %d: %w", len(fds)+1, err)
		}
		fds = append(fds, fd)
	}
	runtime.KeepAlive(&v)
	if len(fds) == 0 {
		return 0, errors.New("the kernel gave no breakpoint to this thread")
	}
	return len(fds), nil
}

// breakpoint is the attr of a disabled user-mode watchpoint on [addr,
// addr+size), trapping on stores (writesOnly) or on loads and stores,
// sampling every trap.
func breakpoint(addr uint64, size uint8, writesOnly bool) unix.PerfEventAttr {
	typ := uint32(bpRW)
	if writesOnly {
		typ = bpW
	}
	return unix.PerfEventAttr{Type: unix.PERF_TYPE_BREAKPOINT, Size: perf.AttrSize(), Bp_type: typ, Ext1: addr, Ext2: uint64(size),
		Sample: 1, Sample_type: sampleType, Read_format: readFormat, Sample_regs_user: memop.RegsMask(runtime.GOARCH),
		Wakeup: 1, // wake the reader at each trap
		// Times on CLOCK_MONOTONIC, as the address sampler's: a trap's time
		// less its sample's is the reuse distance.
		Clockid: unix.CLOCK_MONOTONIC,
		Bits:    unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv | bitSampleIDAll | unix.PerfBitUseClockID}
}

const bitSampleIDAll = 1 << 18

// breakpoints is what the engine asks of the kernel about a slot's
// breakpoint event: kernel/perf's syscalls (kernelBreakpoints), or, in
// the tests of the arm bookkeeping that run without debug registers, a
// model of the kernel's breakpoint PMU.
type breakpoints interface {
	open(tid uint32, leader int) (fd int, id uint64, err error)
	close(fd int)
	disable(fd int) error
	enable(fd int) error
	modify(fd int, a *unix.PerfEventAttr) error
	refresh(fd, n int) error
}

// kernelBreakpoints are the perf_event syscalls.
type kernelBreakpoints struct{}

func (kernelBreakpoints) open(tid uint32, leader int) (int, uint64, error) {
	return openBreakpoint(tid, leader)
}
func (kernelBreakpoints) close(fd int)         { perf.CloseFD(fd) }
func (kernelBreakpoints) disable(fd int) error { return perf.Disable(fd) }
func (kernelBreakpoints) enable(fd int) error  { return perf.Enable(fd) }
func (kernelBreakpoints) modify(fd int, a *unix.PerfEventAttr) error {
	return perf.ModifyAttributes(fd, a)
}
func (kernelBreakpoints) refresh(fd, n int) error { return perf.Refresh(fd, n) }

// records is the reading side of a thread's ring (a *perfring.Ring).
type records interface {
	Read(fn func(rec []byte) bool) (int, error)
	Peek(fn func(rec []byte) bool) (int, error)
}

// Engine holds the watchpoint events of the threads it was given.
type Engine struct {
	bp     breakpoints
	poller *perfring.Poller
	slots  int
	pages  int
	period uint64 // the leaders' sample period, ns of the thread's CPU time (0: counting)
	// counters are counted beside each thread's leader (CountWith): their
	// sum is the distance clock instead of the thread's CPU time.
	counters []unix.PerfEventAttr
	threads  map[uint32]*thread
	events   *perfrecord.Events
	ids      map[uint64]trapID
}

type trapID struct {
	tid  uint32
	slot int // the leader: leaderSlot
}

const (
	leaderSlot  = -1
	counterSlot = -2 // a CountWith event
)

type thread struct {
	counting bool  // AddCounting's: its leader never samples, nor counts CountWith's events
	dirty    bool  // watchpoints changed since the last Flush
	leader   int   // task-clock, counting; its ring holds the group's records
	counters []int // CountWith's events
	bps      []int // one breakpoint per slot (-1: none, its reopening failed)
	ids      []uint64
	armed    []bool
	state    []armState
	// fired: the slot's one-shot trap came (its record was read, or seen
	// unread when re-arming).
	fired []bool
	// retired are the ids of breakpoints closed since the last Read: their
	// traps may still wait in the ring.
	retired []uint64
	ring    *perfring.Ring
	recs    records // the ring's records (the ring itself, but in the model tests)
}

// armState is what the kernel's event limit of a slot's breakpoint holds.
type armState uint8

const (
	// fresh: never limited (as opened, or armed continuously by
	// armContinuous): PERF_EVENT_IOC_REFRESH 1 makes it a one-shot.
	fresh armState = iota
	// oneShot: refreshed for one trap; once that came, the kernel stopped
	// the event in a state an enable does not undo: it is opened again.
	oneShot
	// continuous: armed with no limit (armContinuous).
	continuous
)

// New makes an engine of slots watchpoints per thread, with rings of pages
// data pages.
func New(slots, pages int) (*Engine, error) {
	p, err := perfring.NewPoller()
	if err != nil {
		return nil, err
	}
	return &Engine{bp: kernelBreakpoints{}, poller: p, slots: slots, pages: pages, threads: map[uint32]*thread{}, ids: map[uint64]trapID{}}, nil
}

// placeholder is a harmless address for a disabled breakpoint to watch
// until it is armed: the page at 4 KiB, which no process maps.
const placeholder = 0x1000

// Add opens the events of thread tid, disarmed: its leader samples it
// where the engine's leaders do (SampleEvery), with the CountWith events.
func (e *Engine) Add(tid uint32) error { return e.add(tid, false) }

// AddCounting opens the events of thread tid, disarmed, with a leader that
// only counts whatever the engine's other leaders do: the threads whose
// traps need no distance clock (ComDetective's trap path) beside those
// whose do (ReuseTracker's), on one engine. A thread already added keeps
// its events: Remove it first to change.
func (e *Engine) AddCounting(tid uint32) error { return e.add(tid, true) }

func (e *Engine) add(tid uint32, counting bool) (err error) {
	if _, ok := e.threads[tid]; ok {
		return nil
	}
	t := &thread{leader: -1, armed: make([]bool, e.slots), state: make([]armState, e.slots), fired: make([]bool, e.slots), counting: counting}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	clock := e.leader(!counting)
	if t.leader, err = perf.OpenFD(&clock, int(tid), -1, -1, 0); err != nil {
		return fmt.Errorf("thread %d: task-clock: %w", tid, err)
	}
	var counterIDs []uint64
	for i, c := range e.counters {
		if counting {
			break
		}
		c.Bits |= unix.PerfBitUseClockID // a group's events share one clock
		c.Clockid = unix.CLOCK_MONOTONIC
		fd, err := perf.OpenFD(&c, int(tid), -1, t.leader, 0)
		if err != nil {
			return fmt.Errorf("thread %d: clock event %d: %w", tid, i, err)
		}
		t.counters = append(t.counters, fd)
		id, err := perf.ID(fd)
		if err != nil {
			return err
		}
		counterIDs = append(counterIDs, id)
	}
	// The ring is the leader's, which is never reopened: the breakpoints,
	// reopened after their one-shot traps, write into it.
	if t.ring, err = perfring.Open(t.leader, e.pages); err != nil {
		return fmt.Errorf("thread %d: %w", tid, err)
	}
	if err := e.poller.Add(t.ring); err != nil {
		t.ring.Close()
		t.ring = nil
		return fmt.Errorf("thread %d: %w", tid, err)
	}
	t.recs = t.ring
	leaderID, err := perf.ID(t.leader)
	if err != nil {
		return err
	}
	return e.attach(tid, t, leaderID, counterIDs)
}

// attach opens a breakpoint per slot in thread t's group (its leader and
// ring open) and makes the thread and its events known.
func (e *Engine) attach(tid uint32, t *thread, leaderID uint64, counterIDs []uint64) error {
	for slot := range e.slots {
		fd, id, err := e.bp.open(tid, t.leader)
		if err != nil {
			return fmt.Errorf("thread %d: watchpoint %d: %w", tid, slot, err)
		}
		t.bps, t.ids = append(t.bps, fd), append(t.ids, id)
	}
	e.threads[tid] = t
	for slot, id := range t.ids {
		e.ids[id] = trapID{tid, slot}
	}
	e.ids[leaderID] = trapID{tid, leaderSlot}
	for _, id := range counterIDs {
		e.ids[id] = trapID{tid, counterSlot}
	}
	return e.index()
}

// openBreakpoint opens a disabled breakpoint in thread tid's group, its
// records going to the leader's ring, and returns its fd and id.
func openBreakpoint(tid uint32, leader int) (int, uint64, error) {
	a := breakpoint(placeholder, 8, true)
	fd, err := perf.OpenFD(&a, int(tid), -1, leader, 0)
	if err != nil {
		return -1, 0, err
	}
	id, err := perf.ID(fd)
	if err == nil {
		err = perf.SetOutput(fd, leader)
	}
	if err != nil {
		perf.CloseFD(fd)
		return -1, 0, err
	}
	return fd, id, nil
}

// leader is the attr of a thread's task-clock leader: counting the
// thread's CPU time (the members' traps read it), and, with SampleEvery,
// sampling the thread in user mode every period of it, as a trap is
// sampled (same layout, the same ring: samples and traps come in the
// thread's order), waking the reader at each. A group's events share one
// clock: the leader's is the traps'.
func (e *Engine) leader(sampled bool) unix.PerfEventAttr {
	a := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK, Size: perf.AttrSize(),
		Read_format: readFormat, Bits: unix.PerfBitExcludeHv | unix.PerfBitUseClockID, Clockid: unix.CLOCK_MONOTONIC}
	if e.period > 0 && sampled {
		// Kernel-mode ticks are not sampled (no user registers to decode
		// there); the count is the thread's whole CPU time all the same.
		a.Sample, a.Sample_type, a.Sample_regs_user = e.period, sampleType, memop.RegsMask(runtime.GOARCH)
		a.Bits |= unix.PerfBitExcludeKernel | bitSampleIDAll
		a.Wakeup = 1 // an arm follows its sample by the reader's reaction
	}
	return a
}

// SampleEvery makes the leaders sample their threads every period ns of
// the thread's CPU time (Read's memop.Sampled): a reuse distance from such a
// sample to a trap of the same thread is the thread's CPU time between
// them, exactly. Before Add, or to change the period of leaders that
// sample.
func (e *Engine) SampleEvery(period uint64) error {
	if period == 0 {
		return errors.New("a sample period of 0")
	}
	if e.period == 0 {
		for _, t := range e.threads {
			if !t.counting {
				return errors.New("the leaders are already open, counting: sample before adding threads")
			}
		}
	}
	e.period = period
	var errs []error
	for tid, t := range e.threads {
		if t.counting {
			continue
		}
		if err := perf.SetPeriod(t.leader, period); err != nil {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}

// CountWith makes the distance clock (Trap.Clock, Sampled.Clock) the sum
// of these events, counted in each thread's group beside its leader and
// read with every trap and sample, instead of the thread's CPU time:
// ReuseTracker's clock is the thread's retired loads and stores, where the
// PMU counts them. Before Add.
func (e *Engine) CountWith(attrs []unix.PerfEventAttr) error {
	for _, t := range e.threads {
		if !t.counting {
			return errors.New("threads already have their groups: count before adding threads")
		}
	}
	e.counters = attrs
	return nil
}

// SamplePeriod is the leaders' sample period (0: they count only).
func (e *Engine) SamplePeriod() uint64 { return e.period }

// index rebuilds the record decoder over every open event (a leader's
// samples have the traps' layout).
func (e *Engine) index() error {
	a := breakpoint(placeholder, 8, true)
	attr := perfrecord.Attr{Type: a.Type, SampleType: a.Sample_type, ReadFormat: a.Read_format, SampleIDAll: true, Period: 1, RegsUser: a.Sample_regs_user}
	var ids []uint64
	for id := range e.ids {
		ids = append(ids, id)
	}
	ev, err := perfrecord.NewEvents([]perfrecord.Attr{attr}, [][]uint64{ids})
	if err != nil {
		return err
	}
	e.events = ev
	return nil
}

// Watching says whether thread tid has events.
func (e *Engine) Watching(tid uint32) bool { return e.threads[tid] != nil }

// NumThreads is how many threads have events.
func (e *Engine) NumThreads() int { return len(e.threads) }

// Remove closes thread tid's events (it exited).
func (e *Engine) Remove(tid uint32) {
	t := e.threads[tid]
	if t == nil {
		return
	}
	for id, ti := range e.ids {
		if ti.tid == tid {
			delete(e.ids, id)
		}
	}
	if t.ring != nil {
		e.poller.Remove(t.ring)
	}
	t.close()
	delete(e.threads, tid)
	e.index()
}

func (t *thread) close() {
	if t.ring != nil {
		t.ring.Close()
	}
	for _, fd := range t.bps {
		if fd >= 0 {
			perf.CloseFD(fd)
		}
	}
	for _, fd := range t.counters {
		perf.CloseFD(fd)
	}
	if t.leader >= 0 {
		perf.CloseFD(t.leader)
	}
}

// Close closes every thread's events.
func (e *Engine) Close() {
	for tid := range e.threads {
		e.Remove(tid)
	}
	e.poller.Close()
}

// Slots is how many watchpoints each thread has.
func (e *Engine) Slots() int { return e.slots }

// Threads are the threads with events.
func (e *Engine) Threads() []uint32 {
	out := make([]uint32, 0, len(e.threads))
	for tid := range e.threads {
		out = append(out, tid)
	}
	return out
}

// Arm points thread tid's watchpoint slot at [addr, addr+size) for one
// trap, in effect at once after Flush; the size must be 1, 2, 4 or 8 and
// the address aligned to it. The kernel disables the watchpoint at its
// first trap (PERF_EVENT_IOC_REFRESH 1): the algorithms want one outcome
// per arm, and a watchpoint left armed until its reader reacted trapped on
// every access meanwhile, 25 µs each here: a thread spinning on a watched
// word trapped hundreds of times before the reader disarmed it, which
// spent its process's budget for seconds (docs/sampling.md).
//
// Re-arming moves an armed watchpoint with PERF_EVENT_IOC_MODIFY_ATTRIBUTES;
// one whose trap came is opened again instead: after the limit's trap the
// kernel (6.18) leaves the event stopped, and an enable or a modify then
// installs it with its traps uncounted and unrecorded, each still costing
// the thread. Whether the trap came: its record was read, or, the
// watchpoint disabled first so that none can come after, its record waits
// in the ring (Peek), or records were lost there (then it is opened again
// in case). A move costs what a modify of an enabled watchpoint costs
// (a disable and an enable), and no read of the group.
func (e *Engine) Arm(tid uint32, slot int, addr uint64, size uint8, writesOnly bool) error {
	t, err := e.slot(tid, slot)
	if err != nil {
		return err
	}
	if err := e.arm(t, tid, slot, addr, size, writesOnly); err != nil {
		return fmt.Errorf("thread %d: watchpoint %d on %#x/%d: %w", tid, slot, addr, size, err)
	}
	t.armed[slot] = true
	t.dirty = true
	return nil
}

func (e *Engine) slot(tid uint32, slot int) (*thread, error) {
	t := e.threads[tid]
	if t == nil || slot < 0 || slot >= len(t.bps) {
		return nil, fmt.Errorf("thread %d has no watchpoint %d", tid, slot)
	}
	return t, nil
}

func (e *Engine) arm(t *thread, tid uint32, slot int, addr uint64, size uint8, writesOnly bool) error {
	a := breakpoint(addr, size, writesOnly) // disabled
	if t.state[slot] == oneShot && !t.fired[slot] && t.bps[slot] >= 0 {
		// Disabled, it traps no more, and a trap it made is in the ring
		// (its handler wrote the record before the disable's IPI ran).
		if err := e.bp.disable(t.bps[slot]); err != nil {
			return err
		}
		t.fired[slot] = t.trapUnread(slot)
		if !t.fired[slot] { // its trap is still to come: move it, then enable it, its limit still one trap
			if err := e.bp.modify(t.bps[slot], &a); err != nil {
				return err
			}
			return e.bp.enable(t.bps[slot])
		}
	}
	if t.state[slot] != fresh || t.bps[slot] < 0 {
		if err := e.reopen(t, tid, slot); err != nil {
			return err
		}
	}
	if err := e.bp.modify(t.bps[slot], &a); err != nil {
		return err
	}
	if err := e.bp.refresh(t.bps[slot], 1); err != nil {
		return err
	}
	t.state[slot], t.fired[slot] = oneShot, false
	return nil
}

// trapUnread says whether the ring holds a trap of the slot's breakpoint
// not read yet, or lost records, which might have been one.
func (t *thread) trapUnread(slot int) bool {
	found := false
	t.recs.Peek(func(rec []byte) bool {
		h, err := perfrecord.ParseHeader(rec)
		switch {
		case err != nil:
		case h.Type == perfrecord.TypeLost:
			found = true
		case h.Type == perfrecord.TypeSample && len(rec) >= perfrecord.HeaderSize+8:
			// PERF_SAMPLE_IDENTIFIER: the id first.
			found = binary.NativeEndian.Uint64(rec[perfrecord.HeaderSize:]) == t.ids[slot]
		}
		return !found
	})
	return found
}

// armContinuous arms a watchpoint with no limit: it traps on every
// matching access until Disarm. TrapCost measures a trap's cost by many.
func (e *Engine) armContinuous(tid uint32, slot int, addr uint64, size uint8, writesOnly bool) error {
	t, err := e.slot(tid, slot)
	if err != nil {
		return err
	}
	if t.state[slot] != fresh || t.bps[slot] < 0 {
		if err := e.reopen(t, tid, slot); err != nil {
			return err
		}
	}
	a := breakpoint(addr, size, writesOnly)
	a.Bits &^= unix.PerfBitDisabled
	if err := e.bp.modify(t.bps[slot], &a); err != nil {
		return fmt.Errorf("thread %d: watchpoint %d on %#x/%d: %w", tid, slot, addr, size, err)
	}
	t.state[slot], t.armed[slot], t.dirty = continuous, true, true
	return nil
}

// reopen closes a slot's breakpoint and opens a fresh one, disabled, in
// its place (closed first: a thread holds no more breakpoints than its
// debug registers). The old one's traps may still wait in the ring: its id
// stays known until the next Read.
func (e *Engine) reopen(t *thread, tid uint32, slot int) error {
	if old := t.bps[slot]; old >= 0 {
		e.bp.close(old)
		t.bps[slot] = -1
		t.retired = append(t.retired, t.ids[slot])
	}
	fd, id, err := e.bp.open(tid, t.leader)
	if err != nil {
		return fmt.Errorf("opening it again: %w", err)
	}
	t.bps[slot], t.ids[slot], t.state[slot], t.fired[slot] = fd, id, fresh, false
	e.ids[id] = trapID{tid, slot}
	return nil
}

// Flush makes the arms and disarms since the last Flush take effect now in
// the threads they changed (see reschedule): one reschedule per thread,
// however many of its watchpoints changed.
func (e *Engine) Flush() error {
	var errs []error
	for tid, t := range e.threads {
		if t.dirty {
			t.dirty = false
			if err := t.reschedule(); err != nil {
				errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
			}
		}
	}
	return errors.Join(errs...)
}

// reschedule makes a change to the thread's watchpoints take effect now:
// modified or enabled alone, a watchpoint of a thread running on another
// CPU started trapping only milliseconds later (measured: 6 traps in the
// first 20 ms instead of ~45, TestArmTakesEffectAtOnce); toggling the
// group's leader reschedules the group there at once.
func (t *thread) reschedule() error {
	if err := perf.Disable(t.leader); err != nil {
		return err
	}
	return perf.Enable(t.leader)
}

// Wait blocks until a trap is ready to read or timeout passes.
func (e *Engine) Wait(timeout time.Duration) error {
	_, err := e.poller.Wait(int(timeout / time.Millisecond))
	return err
}

// Disarm disables thread tid's watchpoint slot (at once after Flush).
func (e *Engine) Disarm(tid uint32, slot int) error {
	t := e.threads[tid]
	if t == nil || slot < 0 || slot >= len(t.bps) || !t.armed[slot] {
		return nil
	}
	t.armed[slot] = false
	t.dirty = true
	if t.bps[slot] < 0 {
		return nil
	}
	return e.bp.disable(t.bps[slot])
}
