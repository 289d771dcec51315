package feed

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
)

// reuseBackend arms one process's threads for its ReuseTracker.
type reuseBackend struct {
	d   *Decoder
	pid uint32
}

func (r reuseBackend) Threads() []uint32 { return r.d.watched[r.pid] }

func (r reuseBackend) Arm(tid uint32, slot int, addr uint64, size uint8, trap reuse.Trap) {
	if err := r.d.engine.Arm(tid, slot, addr, size, trap == reuse.TrapW); err == nil {
		r.d.arms++
	}
}

func (r reuseBackend) Disarm(tid uint32, slot int) { r.d.engine.Disarm(tid, slot) }

// Clock implements reuse.Clocker: thread tid's distance clock when another
// thread's sample replaces its watch or its store invalidates it. On
// CLOCK_MONOTONIC that is the event's time; on a thread's own clock (its
// CPU time, or the events it counts) it is read from its group now, a
// reader's pass after the event: the watch's age comes out longer by what
// the thread ran meanwhile (pmu_reuse_arm_latency_seconds bounds it).
func (r reuseBackend) Clock(tid uint32, at uint64) (uint64, bool) {
	if !r.d.ownClock {
		// CLOCK_MONOTONIC "now" (at 0) is when the reader noticed, not
		// when the thread ran last: not known.
		return ReuseClock(at), at != 0
	}
	v, err := r.d.engine.Clock(tid)
	if err != nil {
		return 0, false
	}
	return r.d.reuseClock(v), true
}

// ReuseClock is the live distance clock, a time in ns (the thread's CPU
// time, or CLOCK_MONOTONIC), in units of 2⁻³⁰ s (0.93 ns), so that the
// tracker's log2 bins are powers of two of seconds: bin k is
// [2^(k−30), 2^(k−29)) s, the native histogram's bucket k−29 at schema 0.
func ReuseClock(ns uint64) uint64 {
	return ns/1e9<<30 + (ns%1e9)<<30/1e9
}

// WatchReuse makes the watchpoints serve ReuseTracker instead of
// ComDetective: each watched process gets a tracker (in private mode own
// of each thread's slots are its own, the rest shared by its threads),
// sampled accesses arm them, traps are reuses or invalidations.
//
// Where e samples its threads (SampleEvery; private mode), the trackers
// take those samples and the distance is the thread's CPU time from the
// sampled use to the trapping reuse, read by the kernel at both
// (reuse.ClockThreadCPU); the address sampler's samples of watched processes then
// feed the detector only. Otherwise the trackers take the address
// sampler's samples and the distance is CLOCK_MONOTONIC time (reuse.ClockWall),
// the thread's CPU time only where it ran throughout.
//
// In Shared mode a reuse is another thread's access from the same
// last-level cache domain (the domain of the CPU it was last seen on, from
// SetDomains), and a store from another domain is an invalidation; its
// distance is time, which no one thread's clock measures.
//
// clock, where not "", names the events e counts as the distance clock
// (CountWith; the metrics' clock label): distances are their counts, not time.
func (d *Decoder) WatchReuse(e Watchpoints, slots, own int, mode reuse.Mode, clock string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.SamplePeriod() > 0 && mode == reuse.Shared {
		return errors.New("shared-mode reuse is timed on CLOCK_MONOTONIC: its engine's leaders must not sample")
	}
	if clock != "" && e.SamplePeriod() == 0 {
		return fmt.Errorf("the distance clock %s is read at the watched threads' own samples: the engine's leaders must sample (private mode)", clock)
	}
	r, err := memop.NewResolver(d, runtime.GOARCH)
	if err != nil {
		return err
	}
	r.SetCacheBytes(d.cacheBytes)
	if err := d.attach(e); err != nil {
		return err
	}
	d.ownClock, d.reuseResolver, d.reuseEvents = e.SamplePeriod() > 0, r, clock
	d.reuseMode = mode
	d.reuseSlots, d.reuseOwn = slots, own
	d.trackers = map[uint32]*reuse.Tracker{}
	d.reuseCgroup = map[uint32]uint64{}
	d.reuseGone = map[uint64]*reuse.Tracker{}
	return nil
}

// reuseClockName is the trackers' distance clock.
func (d *Decoder) reuseClockName() string {
	switch {
	case d.reuseEvents != "":
		return d.reuseEvents
	case d.ownClock:
		return reuse.ClockThreadCPU
	}
	return reuse.ClockWall
}

// reuseClock is a distance clock's reading in the trackers' units: time
// (ns) in ReuseClock's, event counts as they are.
func (d *Decoder) reuseClock(v uint64) uint64 {
	if d.reuseEvents != "" {
		return v
	}
	return ReuseClock(v)
}

// reuseUse is a resolved sampled access as a tracker's use at clock (the
// access's bytes; a read-modify-write is a write as a use).
func reuseUse(a *memaccess.Access, clock uint64) reuse.Use {
	size := max(a.Size, 1)
	kind := reuse.Read
	if a.Store {
		kind = reuse.Write
	}
	return reuse.Use{TID: a.TID, Addr: a.Addr &^ uint64(size-1), Size: size, Kind: kind, Clock: clock, At: a.Time}
}

// reuseEvent is a watched thread's sample or trap, read from the engine's
// rings, to be handled in time order.
type reuseEvent struct {
	pid, cpu uint32
	sample   bool
	use      reuse.Use // a sample
	hit      reuse.Hit // a trap
}

// reuseSampled takes a sample of a thread watched for ReuseTracker, from
// its leader (ownClock): its slots are armed at once, in applyReuse.
func (d *Decoder) reuseSampled(s memop.Sampled) {
	a, r := d.reuseResolver.Sample(s.Sample, 0)
	if r != memop.Resolved {
		return
	}
	d.pendingReuse = append(d.pendingReuse, reuseEvent{pid: a.PID, cpu: a.CPU, sample: true, use: reuseUse(&a, d.reuseClock(s.Clock))})
}

// reuseTrapped takes a trap of a thread watched for ReuseTracker, its
// access decoded as memop.Resolver.Trap says (the reuse's kind and
// address); applyReuse hands it to the tracker.
func (d *Decoder) reuseTrapped(tr memop.Trap) {
	clock := tr.Time
	if d.ownClock {
		clock = tr.Clock
	}
	h := reuse.Hit{TID: tr.TID, Slot: tr.Slot, Clock: d.reuseClock(clock), At: tr.Time, Watched: tr.Watched}
	// Undecoded, the trap is an outcome all the same, of unknown kind.
	if acc, r := d.reuseResolver.Trap(tr.PID, tr.IP, tr.Regs); r == memop.Resolved {
		h.Addr, h.Size, h.Kind = acc.Addr, uint8(min(acc.Width, 255)), reuse.Read
		if acc.Kind == memop.Store {
			h.Kind = reuse.Write // a read-modify-write reads what the use left
		}
	}
	d.pendingReuse = append(d.pendingReuse, reuseEvent{pid: tr.PID, cpu: tr.CPU, hit: h})
}

// applyReuse hands the traps and samples of one read of the rings to the
// trackers. Each ring is in its thread's order; the rings are merged by
// time, so that a trap in one thread is seen after the sample of another
// that armed it.
func (d *Decoder) applyReuse() {
	slices.SortStableFunc(d.pendingReuse, func(a, b reuseEvent) int { return cmp.Compare(a.at(), b.at()) })
	for _, ev := range d.pendingReuse {
		if !ev.sample {
			d.threadCPU[ev.hit.TID] = ev.cpu
			if t := d.trackers[ev.pid]; t != nil {
				t.TrappedOn(ev.hit)
			}
			continue
		}
		d.threadCPU[ev.use.TID] = ev.cpu
		if !d.reusing[ev.pid] || (d.gov != nil && !d.gov.Allow(ev.pid)) {
			continue
		}
		if d.tracker(ev.pid).Sample(ev.use) {
			d.armedAt = append(d.armedAt, ev.use.At)
		}
	}
	if len(d.armedAt) > 0 {
		d.engine.Flush()
		d.armLatency(d.armedAt)
		d.armedAt = d.armedAt[:0]
	}
}

// at is the event's time, CLOCK_MONOTONIC ns.
func (e *reuseEvent) at() uint64 {
	if e.sample {
		return e.use.At
	}
	return e.hit.At
}

// SampleReuseEvery sets the period at which the engine's leaders sample
// the watched threads (ns of each thread's CPU time), where they do: the
// address sampler's, as its governor changes it.
func (d *Decoder) SampleReuseEvery(period uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ownClock || period == 0 || period == d.engine.SamplePeriod() {
		return nil
	}
	return d.engine.SampleEvery(period)
}

func (d *Decoder) tracker(pid uint32) *reuse.Tracker {
	t := d.trackers[pid]
	if t == nil {
		t = reuse.New(reuseBackend{d, pid}, reuse.Options{Slots: d.reuseSlots, Own: d.reuseOwn, Seed: uint64(pid), Mode: d.reuseMode, Domain: d.threadDomain, Clock: d.reuseClockName()})
		d.trackers[pid] = t
	}
	return t
}

// threadDomain is the last-level cache domain of the CPU tid was last seen
// on (that CPU where sysfs does not place it); a thread not seen yet is a
// domain of its own.
func (d *Decoder) threadDomain(tid uint32) int {
	cpu, ok := d.threadCPU[tid]
	if !ok {
		return -1 - int(tid)
	}
	name := d.domain(cpu)
	id, ok := d.domainIDs[name]
	if !ok {
		id = len(d.domainIDs)
		d.domainIDs[name] = id
	}
	return id
}

// ReuseView calls f with each watched process's tracker and the cgroup its
// samples came from, and each cgroup's totals of processes gone (pid 0),
// held still.
func (d *Decoder) ReuseView(f func(pid uint32, cgroup uint64, t *reuse.Tracker)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for pid, t := range d.trackers {
		f(pid, d.reuseCgroup[pid], t)
	}
	for cg, t := range d.reuseGone {
		f(0, cg, t)
	}
}

// ReuseCgroupIDs lists the cgroups holding totals of processes gone.
func (d *Decoder) ReuseCgroupIDs() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]uint64, 0, len(d.reuseGone))
	for cg := range d.reuseGone {
		ids = append(ids, cg)
	}
	return ids
}

// ForgetReuseCgroups drops the totals of processes gone from cgroups that
// are gone themselves, so that their series end and pods that come and go
// do not grow the decoder. A cgroup some watched process still reports
// (one moved out of it before it was removed) keeps its totals: without
// them its counters would go down.
func (d *Decoder) ForgetReuseCgroups(ids []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	live := map[uint64]bool{}
	for _, cg := range d.reuseCgroup {
		live[cg] = true
	}
	for _, cg := range ids {
		if !live[cg] {
			delete(d.reuseGone, cg)
		}
	}
}

// armLatency bins how long after their samples (times, CLOCK_MONOTONIC
// ns) the arms just flushed took effect.
func (d *Decoder) armLatency(times []uint64) {
	if len(times) == 0 {
		return
	}
	now, ok := d.now()
	if !ok {
		return
	}
	for _, t := range times {
		if now > t {
			d.armLatencies[bits.Len64(ReuseClock(now-t))-1]++
		}
	}
}

// ArmLatency is how long after their samples the reuse slots' arms took
// effect, by log2 bin of ReuseClock units (bin k: [2^(k−30), 2^(k−29)) s).
func (d *Decoder) ArmLatency() [reuse.Bins]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.armLatencies
}
