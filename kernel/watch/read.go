package watch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// Read drains every thread's ring, handing each trap to fn; it returns the
// records it could not read and the records the kernel dropped for a full
// ring (PERF_RECORD_LOST).
func (e *Engine) Read(fn func(memop.Trap)) (bad int, lost uint64) { return e.ReadSampled(fn, nil) }

// ReadSampled is Read, handing the leaders' samples to sampled (nil: they
// are skipped); each thread's records come in its order.
func (e *Engine) ReadSampled(fn func(memop.Trap), sampled func(memop.Sampled)) (bad int, lost uint64) {
	var s perfrecord.Sample
	for _, t := range e.threads {
		retired := len(t.retired) // closed before this read: all their traps are in the ring
		t.recs.Read(func(rec []byte) bool {
			h, err := perfrecord.ParseHeader(rec)
			if err == nil && h.Type == perfrecord.TypeLost {
				if l, err := perfrecord.DecodeLost(rec); err == nil {
					lost += l.Lost
				}
				return true
			}
			if err != nil || h.Type != perfrecord.TypeSample {
				return true
			}
			if err := perfrecord.DecodeSample(rec, &e.events.Layouts[0], &s); err != nil {
				bad++
				return true
			}
			ti, ok := e.ids[s.ID]
			if !ok {
				bad++
				return true
			}
			if ti.slot == leaderSlot {
				if sampled != nil && len(s.Read) > 0 {
					sampled(memop.Sampled{Sample: &s, Clock: e.clock(s.Read)})
				}
				return true
			}
			if ti.slot >= 0 && s.ID == t.ids[ti.slot] && t.state[ti.slot] == oneShot {
				t.fired[ti.slot] = true // the kernel disabled it: re-armed, it is opened again
			}
			tr := memop.Trap{PID: s.PID, TID: s.TID, CPU: s.CPU, Slot: ti.slot, IP: s.IP, Time: s.Time, Watched: s.Addr}
			if len(s.Read) > 0 {
				tr.Clock = e.clock(s.Read)
			}
			if s.RegsABI != 0 {
				tr.Regs = &s.Regs
			}
			fn(tr)
			return true
		})
		for _, id := range t.retired[:retired] {
			delete(e.ids, id)
		}
		t.retired = t.retired[:copy(t.retired, t.retired[retired:])]
	}
	return bad, lost
}

// clock is the distance clock in a group read: the sum of the CountWith
// events, or else the leader's task-clock (first).
func (e *Engine) clock(read []perfrecord.ReadValue) uint64 {
	if len(e.counters) == 0 {
		return read[0].Value
	}
	var sum uint64
	for _, v := range read {
		if e.ids[v.ID].slot == counterSlot {
			sum += v.Value
		}
	}
	return sum
}

// Clock is thread tid's distance clock now: the sum of its CountWith
// events, or else its CPU time (its task-clock, ns), as the samples carry
// it (clock).
func (e *Engine) Clock(tid uint32) (uint64, error) {
	t := e.threads[tid]
	if t == nil {
		return 0, fmt.Errorf("thread %d is not watched", tid)
	}
	// PERF_FORMAT_GROUP|ID: nr, then (value, id) per event, the leader's
	// first.
	b := make([]byte, 8+16*(1+len(t.bps)+len(e.counters)))
	n, err := perf.ReadFD(t.leader, b)
	if err != nil {
		return 0, fmt.Errorf("thread %d: reading its group: %w", tid, err)
	}
	if n < 24 {
		return 0, fmt.Errorf("thread %d: reading its group: %d bytes", tid, n)
	}
	nr := min(binary.LittleEndian.Uint64(b), uint64(n-8)/16)
	read := make([]perfrecord.ReadValue, nr)
	for i := range read {
		read[i] = perfrecord.ReadValue{Value: binary.LittleEndian.Uint64(b[8+16*i:]), ID: binary.LittleEndian.Uint64(b[16+16*i:])}
	}
	return e.clock(read), nil
}

// TrapCost measures what one trap costs the trapping thread, as the
// engine traps (registers, a wakeup): the calling thread's CPU time over n
// stores to a variable of its own, watched minus unwatched, per store. The
// governor charges each trap this much of its target's budget. A
// measurement whose watchpoint never trapped is made again, up to three
// times in all: CI saw that once, in an exporter whose breakpoints had
// just been shown to fire, and not again in 1,500 tries here. The likely
// cause, found since: the variable was on the goroutine's stack (the
// compiler's escape analysis put it there), which moves when it grows, as
// it may while arming; the watched variable is now on a page of its own.
func TrapCost(n int) (time.Duration, error) {
	var err error
	for range 3 {
		var cost time.Duration
		if cost, err = trapCost(n); !errors.Is(err, errNeverTrapped) {
			return cost, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, err
}

// errNeverTrapped: a watchpoint armed on a variable the thread then
// stored to did not trap.
var errNeverTrapped = errors.New("the watchpoint never trapped")

func trapCost(n int) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e, err := New(1, 256)
	if err != nil {
		return 0, err
	}
	defer e.Close()
	tid := perf.Gettid()
	if err := e.Add(tid); err != nil {
		return 0, err
	}
	v, release, err := perf.WatchedWord()
	if err != nil {
		return 0, err
	}
	defer release()
	stores := func() (time.Duration, error) {
		t0, err := perf.ThreadCPU()
		if err != nil {
			return 0, err
		}
		for i := range n {
			atomic.StoreUint64(v, uint64(i))
		}
		t1, err := perf.ThreadCPU()
		if err != nil {
			return 0, err
		}
		return t1 - t0, nil
	}
	unwatched, err := stores()
	if err != nil {
		return 0, err
	}
	if err := e.armContinuous(tid, 0, uint64(uintptr(unsafe.Pointer(v))), 8, true); err != nil {
		return 0, err
	}
	if err := e.Flush(); err != nil {
		return 0, err
	}
	watched, err := stores()
	if err != nil {
		return 0, err
	}
	e.Disarm(tid, 0)
	e.Flush()
	traps := uint64(0)
	_, lost := e.Read(func(memop.Trap) { traps++ })
	if traps += lost; traps == 0 {
		return 0, errNeverTrapped
	}
	return max(watched-unwatched, 0) / time.Duration(traps), nil
}
