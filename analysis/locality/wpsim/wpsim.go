// Package wpsim simulates the hardware watchpoints of a set of threads
// over an access trace, with the debug registers' semantics: a few
// registers per thread, each watching 1 to 8 aligned bytes for stores or
// for loads and stores, trapping on the first matching access of its
// thread once armed (a delay, in accesses of any thread, models the time
// an arm takes to reach a running thread). The trace harnesses of
// ReuseTracker and ComDetective run on it exactly as the live engine runs
// on perf breakpoints.
package wpsim

import "math/bits"

// Registers are the threads' debug registers.
type Registers struct {
	slots   int
	delay   uint64
	global  uint64 // accesses so far, all threads
	threads map[uint32][]register
	order   []uint32
}

type register struct {
	armed      bool
	writesOnly bool
	addr       uint64
	size       uint8
	from       uint64 // the global access from which it traps
}

// New has slots registers per thread; an arm takes effect delay accesses
// after the current one.
func New(slots int, delay uint64) *Registers {
	return &Registers{slots: slots, delay: delay, threads: map[uint32][]register{}}
}

// Threads are the threads seen so far, in order of appearance.
func (r *Registers) Threads() []uint32 { return r.order }

// Join adds a thread (its registers unarmed); it reports whether it is new.
func (r *Registers) Join(tid uint32) bool {
	if _, ok := r.threads[tid]; ok {
		return false
	}
	r.threads[tid] = make([]register, r.slots)
	r.order = append(r.order, tid)
	return true
}

// Arm sets register slot of tid.
func (r *Registers) Arm(tid uint32, slot int, addr uint64, size uint8, writesOnly bool) {
	if regs := r.threads[tid]; slot >= 0 && slot < len(regs) {
		regs[slot] = register{armed: true, writesOnly: writesOnly, addr: addr, size: size, from: r.global + 1 + r.delay}
	}
}

// Disarm clears register slot of tid.
func (r *Registers) Disarm(tid uint32, slot int) {
	if regs := r.threads[tid]; slot >= 0 && slot < len(regs) {
		regs[slot].armed = false
	}
}

// Access advances the trace by one access of tid (which must have
// joined) and returns the register it trapped on, or -1.
func (r *Registers) Access(tid uint32, write bool, addr uint64, size uint8) int {
	m := r.AccessAll(tid, write, addr, size)
	if m == 0 {
		return -1
	}
	return bits.TrailingZeros64(m)
}

// AccessAll is Access reporting every register the access trapped on (bit
// i: register i), as the kernel reports a trap per breakpoint event.
func (r *Registers) AccessAll(tid uint32, write bool, addr uint64, size uint8) uint64 {
	r.global++
	var m uint64
	for i, reg := range r.threads[tid] {
		if reg.armed && r.global >= reg.from && (write || !reg.writesOnly) &&
			addr < reg.addr+uint64(reg.size) && reg.addr < addr+uint64(size) {
			m |= 1 << i
		}
	}
	return m
}
