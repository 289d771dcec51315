package perfsample

import (
	"math/bits"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/watch"
	"github.com/pmu-exporter/pmu_exporter/comm/reuse"
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

// ReuseClock is the live distance clock: CLOCK_MONOTONIC (the samples'
// and the traps' times) in units of 2⁻³⁰
// s (0.93 ns), so that the tracker's log2 bins are powers of two of
// seconds: bin k is [2^(k−30), 2^(k−29)) s, the native histogram's bucket
// k−29 at schema 0.
func ReuseClock(ns uint64) uint64 {
	return ns/1e9<<30 + (ns%1e9)<<30/1e9
}

// WatchReuse makes the watchpoints serve ReuseTracker instead of
// ComDetective: each watched process gets a tracker (private mode; its
// slots shared by its threads), sampled accesses arm them, traps are
// reuses or invalidations. The distance clock is CLOCK_MONOTONIC
// (ReuseClock): the time between the sampled use and the trapping reuse,
// the thread's CPU time where it ran throughout.
//
// In Shared mode a reuse is another thread's access from the same
// last-level cache domain (the domain of the CPU it was last seen on, from
// SetDomains), and a store from another domain is an invalidation.
func (d *Decoder) WatchReuse(e *watch.Engine, slots int, mode reuse.Mode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reuseMode = mode
	d.threadCPU = map[uint32]uint32{}
	d.domainIDs = map[string]int{}
	d.engine = e
	d.watched = map[uint32][]uint32{}
	d.lastOf = map[[2]uint32]int{}
	d.reuseSlots = slots
	d.trackers = map[uint32]*reuse.Tracker{}
	d.reuseCgroup = map[uint32]uint64{}
	d.reuseGone = map[uint64]*reuse.Tracker{}
}

func (d *Decoder) tracker(pid uint32) *reuse.Tracker {
	t := d.trackers[pid]
	if t == nil {
		t = reuse.New(reuseBackend{d, pid}, reuse.Options{Slots: d.reuseSlots, Seed: uint64(pid), Mode: d.reuseMode, Domain: d.threadDomain})
		d.trackers[pid] = t
	}
	return t
}

// threadDomain is the last-level cache domain of the CPU tid was last seen
// on; a thread not seen yet, or on a CPU sysfs does not place, is a domain
// of its own.
func (d *Decoder) threadDomain(tid uint32) int {
	cpu, ok := d.threadCPU[tid]
	name := d.domainOf[cpu]
	if !ok || name == "" {
		return -1 - int(tid)
	}
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

// armLatency bins how long after their samples (times, CLOCK_MONOTONIC
// ns) the arms just flushed took effect.
func (d *Decoder) armLatency(times []uint64) {
	if len(times) == 0 {
		return
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return
	}
	now := uint64(ts.Nano())
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
