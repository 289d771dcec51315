package watch

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// modelBP is one breakpoint event as the kernel's breakpoint PMU keeps it.
type modelBP struct {
	id      uint64
	addr    uint64
	writes  bool // HW_BREAKPOINT_W: stores only
	enabled bool
	// limit is event_limit: PERF_EVENT_IOC_REFRESH adds to it, each trap
	// takes one, and the trap that takes the last disables the event.
	limit int
	// stopped is PERF_HES_STOPPED, which the limit's last trap leaves: an
	// enable (or a refresh) installs the event again without clearing it,
	// and perf_bp_event drops a stopped event's traps (docs/sampling.md,
	// "One trap per arm"). Only a fresh event is not stopped.
	stopped bool
}

// modelKernel answers the engine's breakpoint calls as the kernel does,
// for one thread, writing each trap's record to its ring: the arm
// bookkeeping runs against it on any host, debug registers or not.
type modelKernel struct {
	t      *testing.T
	bps    map[int]*modelBP
	nextFD int
	nextID uint64
	ring   modelRing
	clock  uint64
	// unseen counts traps the kernel took and dropped: a stopped event
	// enabled again. The engine must never leave one armed.
	unseen int
}

func newModelKernel(t *testing.T) *modelKernel {
	return &modelKernel{t: t, bps: map[int]*modelBP{}, nextFD: 100, nextID: 1000}
}

func (k *modelKernel) open(uint32, int) (int, uint64, error) {
	k.nextFD++
	k.nextID++
	k.bps[k.nextFD] = &modelBP{id: k.nextID, addr: placeholder, writes: true}
	return k.nextFD, k.nextID, nil
}

func (k *modelKernel) bp(fd int) *modelBP {
	b := k.bps[fd]
	if b == nil {
		k.t.Fatalf("the engine used fd %d, which is not open", fd)
	}
	return b
}

func (k *modelKernel) close(fd int)         { k.bp(fd); delete(k.bps, fd) }
func (k *modelKernel) disable(fd int) error { k.bp(fd).enabled = false; return nil }
func (k *modelKernel) enable(fd int) error  { k.bp(fd).enabled = true; return nil }
func (k *modelKernel) refresh(fd, n int) error {
	b := k.bp(fd)
	b.limit += n
	b.enabled = true
	return nil
}

// modify is MODIFY_ATTRIBUTES: the event is disabled, re-targeted, and
// enabled again unless the new attr is disabled; limit and stopped stay.
func (k *modelKernel) modify(fd int, a *unix.PerfEventAttr) error {
	b := k.bp(fd)
	b.addr, b.writes = a.Ext1, a.Bp_type == bpW
	b.enabled = a.Bits&unix.PerfBitDisabled == 0
	return nil
}

// access is the thread touching addr: each enabled breakpoint on it traps.
func (k *modelKernel) access(addr uint64, store bool) {
	k.clock += 100
	for _, b := range k.bps {
		if !b.enabled || b.addr != addr || b.writes && !store {
			continue
		}
		if b.stopped {
			k.unseen++
			continue
		}
		k.ring.add(trapRecord(b.id, addr, k.clock))
		if b.limit > 0 {
			if b.limit--; b.limit == 0 {
				b.enabled, b.stopped = false, true
			}
		}
	}
}

// trapRecord is a breakpoint's sample in the engine's layout (sampleType,
// readFormat): the leader's task-clock in the group read, no registers.
func trapRecord(id, addr, clock uint64) []byte {
	b := make([]byte, 8, 96)
	u64 := func(v uint64) { b = binary.NativeEndian.AppendUint64(b, v) }
	u64(id)            // IDENTIFIER
	u64(0x401000)      // IP
	u64(7 | 7<<32)     // PID, TID
	u64(clock)         // TIME
	u64(addr)          // ADDR
	u64(1)             // CPU, res
	u64(1)             // READ: nr
	u64(clock)         // the leader's value
	u64(modelLeaderID) // and id
	u64(0)             // REGS_USER: abi none
	binary.NativeEndian.PutUint32(b, perfrecord.TypeSample)
	binary.NativeEndian.PutUint16(b[6:], uint16(len(b)))
	return b
}

const modelLeaderID = 999

// modelRing is a thread's ring: Read takes its records, Peek leaves them.
type modelRing struct{ recs [][]byte }

func (r *modelRing) add(rec []byte) { r.recs = append(r.recs, rec) }

func (r *modelRing) Read(fn func([]byte) bool) (int, error) {
	n, _ := r.Peek(fn)
	r.recs = r.recs[n:]
	return n, nil
}

func (r *modelRing) Peek(fn func([]byte) bool) (int, error) {
	for i, rec := range r.recs {
		if !fn(rec) {
			return i + 1, nil
		}
	}
	return len(r.recs), nil
}

// lost is a PERF_RECORD_LOST of n records.
func (r *modelRing) lost(n uint64) {
	b := make([]byte, 24)
	binary.NativeEndian.PutUint32(b, perfrecord.TypeLost)
	binary.NativeEndian.PutUint16(b[6:], 24)
	binary.NativeEndian.PutUint64(b[16:], n)
	r.add(b)
}

// modelEngine is an engine of slots watchpoints on one thread whose
// breakpoints and ring are the model's.
func modelEngine(t *testing.T, slots int) (*Engine, *modelKernel) {
	k := newModelKernel(t)
	e := &Engine{bp: k, slots: slots, threads: map[uint32]*thread{}, ids: map[uint64]trapID{}}
	th := &thread{leader: -1, armed: make([]bool, slots), state: make([]armState, slots), fired: make([]bool, slots), recs: &k.ring}
	if err := e.attach(7, th, modelLeaderID, nil); err != nil {
		t.Fatal(err)
	}
	return e, k
}

// The arm bookkeeping of TestEngineTrapsOncePerArm, against the model of
// the kernel's breakpoint PMU instead of debug registers: an arm traps
// once however many accesses follow; re-armed after its trap, read or
// not, it traps once more (the engine reopens the stopped event, which an
// enable would leave trapping unseen); moved before its trap it traps once
// where it now points; disarmed and armed again its limit does not stack;
// lost records count as its trap; armed with no limit it traps each time.
// No trap is ever dropped by a stopped event.
func TestArmBookkeepingOnTheKernelModel(t *testing.T) {
	e, k := modelEngine(t, 2)
	const a, b = 0x7000, 0x7040
	arm := func(slot int, addr uint64) {
		t.Helper()
		if err := e.Arm(7, slot, addr, 8, true); err != nil {
			t.Fatal(err)
		}
	}
	stores := func(addr uint64, n int) {
		for range n {
			k.access(addr, true)
		}
	}
	read := func() (traps []memop.Trap) {
		t.Helper()
		bad, lost := e.Read(func(tr memop.Trap) { traps = append(traps, tr) })
		if bad != 0 {
			t.Fatalf("%d records the engine could not read", bad)
		}
		_ = lost
		return traps
	}
	expect := func(what string, traps []memop.Trap, n int, slot int, addr uint64) {
		t.Helper()
		if len(traps) != n {
			t.Fatalf("%s: %d traps, want %d", what, len(traps), n)
		}
		for _, tr := range traps {
			if tr.Slot != slot || tr.Watched != addr || tr.TID != 7 {
				t.Errorf("%s: trap %+v, want slot %d on %#x", what, tr, slot, addr)
			}
		}
		if k.unseen != 0 {
			t.Fatalf("%s: the kernel dropped %d traps of a stopped watchpoint the engine left armed", what, k.unseen)
		}
	}

	arm(0, a)
	stores(a, 5)
	expect("one arm, five stores", read(), 1, 0, a)

	arm(0, a) // after its trap was read: reopened
	stores(a, 5)
	expect("re-armed after the read", read(), 1, 0, a)

	arm(0, a)
	stores(a, 1)
	arm(0, a) // its trap is in the ring, unread: seen by Peek, reopened
	stores(a, 5)
	expect("re-armed before the read", read(), 2, 0, a)

	arm(0, a)
	arm(0, b) // moved before its trap
	stores(a, 3)
	stores(b, 3)
	expect("moved before its trap", read(), 1, 0, b)

	arm(1, a)
	if err := e.Disarm(7, 1); err != nil {
		t.Fatal(err)
	}
	stores(a, 2)
	arm(1, a) // the limit does not stack: one trap
	stores(a, 5)
	expect("disarmed and armed again", read(), 1, 1, a)

	arm(1, b)
	k.ring.lost(3) // records lost: the trap may be among them
	arm(1, b)
	stores(b, 4)
	traps := read()
	expect("re-armed after lost records", traps, 1, 1, b)

	fds := len(k.bps)
	if err := e.armContinuous(7, 0, a, 8, true); err != nil {
		t.Fatal(err)
	}
	stores(a, 6)
	expect("armed with no limit", read(), 6, 0, a)
	arm(0, a) // back to one trap: a continuous event is reopened fresh
	stores(a, 3)
	expect("one-shot after continuous", read(), 1, 0, a)
	if len(k.bps) != fds {
		t.Errorf("%d breakpoints open, want %d: reopening leaks", len(k.bps), fds)
	}
}
