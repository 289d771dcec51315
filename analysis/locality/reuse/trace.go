package reuse

import (
	"bufio"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/watchbudget"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/wpsim"
)

// Access is one access of a trace.
type Access struct {
	TID   uint32
	Write bool
	Addr  uint64
	Size  uint8
	// Time is the thread's CPU time at the access in ns, where the trace
	// gives one (a fifth field); 0: none.
	Time uint64
}

// ParseAccess reads a trace line: "TID R|W 0xADDR SIZE [NS]", NS the
// thread's CPU time at the access, in nanoseconds.
func ParseAccess(line string) (Access, error) {
	f := strings.Fields(line)
	if len(f) != 4 && len(f) != 5 {
		return Access{}, fmt.Errorf("want TID R|W 0xADDR SIZE [NS], got %d fields", len(f))
	}
	tid, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return Access{}, fmt.Errorf("TID %q: not a thread id", f[0])
	}
	var a Access
	a.TID = uint32(tid)
	switch f[1] {
	case "R":
	case "W":
		a.Write = true
	default:
		return Access{}, fmt.Errorf("access %q: want R or W", f[1])
	}
	if !strings.HasPrefix(f[2], "0x") {
		return Access{}, fmt.Errorf("ADDR %q: want hex with 0x", f[2])
	}
	if a.Addr, err = strconv.ParseUint(f[2][2:], 16, 64); err != nil {
		return Access{}, fmt.Errorf("ADDR %q: %v", f[2], err)
	}
	size, err := strconv.ParseUint(f[3], 10, 8)
	if err != nil || size == 0 || size > 64 {
		return Access{}, fmt.Errorf("SIZE %q: want 1 to 64 bytes", f[3])
	}
	a.Size = uint8(size)
	if len(f) == 5 {
		if a.Time, err = strconv.ParseUint(f[4], 10, 64); err != nil || a.Time == 0 {
			return Access{}, fmt.Errorf("NS %q: want the thread's CPU time in nanoseconds, above 0", f[4])
		}
	}
	return a, nil
}

// Replay runs a tracker over a trace on simulated debug registers
// (wpsim): Slots registers per thread, the first matching access after an
// arm (ArmDelay accesses later) traps; each thread's accesses are sampled
// every Period accesses on average (uniform in [Period/2, 3·Period/2],
// seeded). The clock is the thread's own access count (Private) or its
// domain's (Shared).
type Replay struct {
	Tracker *Tracker
	// Arms and Traps count the simulated registers armed and trapped, as
	// the live exporter counts its watchpoints'.
	Arms, Traps uint64
	regs        *wpsim.Registers
	period      uint64
	rng         *rand.Rand
	mode        Mode
	domain      func(uint32) int
	threads     map[uint32]*thread
	clocks      map[int]uint64
	skip        func(uint32) bool
	timed       bool
	gov         *watchbudget.Budget
	cpu         uint64 // the trace's threads' CPU time so far, ns (governed)
}

// thread is a thread's accesses so far, its next sample's, and its CPU
// time at its latest access (timed traces, or governed).
type thread struct{ n, next, ns uint64 }

// ReplayOptions are the harness's.
type ReplayOptions struct {
	Options
	Period, ArmDelay uint64
	// Unsampled, when set, says a thread's accesses are not sampled (it
	// still traps): a writer outside the profiled workload.
	Unsampled func(tid uint32) bool
	// Timed makes the distance clock each thread's CPU time as the trace
	// gives it (Private mode; every access needs a time), as live on
	// ClockThreadCPU; sampling still goes by accesses.
	Timed bool
	// Governor, where set, governs the trace's watchpoints as live
	// (analysis/locality/watchbudget): the trace is one process (pid 0), each
	// trap is charged, and a sample arms only while its traps' cost is
	// within the budget of the CPU time its threads ran, which every
	// access must then give (its fifth field). A sample over budget is
	// not the tracker's (live: used without watchpoints).
	Governor *watchbudget.Budget
}

// NewReplay makes the harness and its tracker.
func NewReplay(o ReplayOptions) *Replay {
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Domain == nil {
		o.Domain = func(uint32) int { return 0 }
	}
	r := &Replay{regs: wpsim.New(o.Slots, o.ArmDelay), period: max(o.Period, 1), mode: o.Mode, domain: o.Domain,
		rng: rand.New(rand.NewPCG(o.Seed+1, o.Seed^0x5851F42D4C957F2D)), threads: map[uint32]*thread{}, clocks: map[int]uint64{}, skip: o.Unsampled,
		timed: o.Timed && o.Mode == Private, gov: o.Governor}
	r.Tracker = New(r, o.Options)
	return r
}

// Threads implements Backend: the threads seen so far.
func (r *Replay) Threads() []uint32 { return r.regs.Threads() }

// Arm implements Backend.
func (r *Replay) Arm(tid uint32, slot int, addr uint64, size uint8, trap Trap) {
	r.regs.Arm(tid, slot, addr, size, trap == TrapW)
	r.Arms++
}

// Disarm implements Backend.
func (r *Replay) Disarm(tid uint32, slot int) { r.regs.Disarm(tid, slot) }

// Clock implements Clocker: the harness is synchronous, so a thread's
// clock now is its clock at the event (its own access count, or its
// domain's in Shared mode).
func (r *Replay) Clock(tid uint32, _ uint64) (uint64, bool) {
	if r.mode == Shared {
		return r.clocks[r.domain(tid)], true
	}
	t := r.threads[tid]
	if t == nil {
		return 0, false
	}
	if r.timed {
		return t.ns, true
	}
	return t.n, true
}

// Finish ends the run: the watches still armed were not reused in it.
func (r *Replay) Finish() { r.Tracker.Finish() }

func (r *Replay) thread(tid uint32) *thread {
	t := r.threads[tid]
	if t == nil {
		t = &thread{next: r.gap()}
		r.threads[tid] = t
		r.regs.Join(tid)
		r.Tracker.Join(tid)
	}
	return t
}

func (r *Replay) gap() uint64 {
	return r.period/2 + r.rng.Uint64N(r.period+1)
}

// Access replays one access: a trap if a register of its thread matches,
// then a sample if its thread's sampling period elapsed.
func (r *Replay) Access(a Access) {
	t := r.thread(a.TID)
	t.n++
	dom := r.domain(a.TID)
	r.clocks[dom]++
	clock := t.n
	switch {
	case r.mode == Shared:
		clock = r.clocks[dom]
	case r.timed:
		clock = a.Time
	}
	if r.gov != nil {
		r.cpu += a.Time - min(t.ns, a.Time)
	}
	t.ns = a.Time
	kind := Read
	if a.Write {
		kind = Write
	}
	for m := r.regs.AccessAll(a.TID, a.Write, a.Addr, a.Size); m != 0; m &= m - 1 {
		r.Traps++
		if r.gov != nil {
			r.gov.Trapped(0, 1)
		}
		r.Tracker.Trapped(Hit{TID: a.TID, Slot: bits.TrailingZeros64(m), Addr: a.Addr, Size: a.Size, Kind: kind, Clock: clock})
		if r.gov != nil && r.gov.Over(0) {
			r.disarmAll()
		}
	}
	if t.n >= t.next && (r.skip == nil || !r.skip(a.TID)) {
		t.next = t.n + r.gap()
		if r.allow() {
			r.Tracker.Sample(Use{TID: a.TID, Addr: a.Addr, Size: a.Size, Kind: kind, Clock: clock})
		}
	}
}

// disarmAll disarms every register, as live disarms a process whose traps
// spent its budget (an armed watchpoint would still trap once); the
// tracker's watches stay until a sample replaces them or the run ends.
func (r *Replay) disarmAll() {
	for _, tid := range r.regs.Threads() {
		for slot := range r.Tracker.o.Slots {
			r.regs.Disarm(tid, slot)
		}
	}
}

// allow asks the governor, where there is one, whether a sample may arm
// now, on the CPU time the trace's threads have run.
func (r *Replay) allow() bool {
	if r.gov == nil {
		return true
	}
	r.gov.Ran(0, float64(r.cpu)/1e9)
	return r.gov.Allow(0)
}

// Run replays a trace read from in, one access per line; blank lines and
// lines starting with # are skipped.
func (r *Replay) Run(in io.Reader) error {
	sc := bufio.NewScanner(in)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		a, err := ParseAccess(text)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if r.timed && a.Time == 0 {
			return fmt.Errorf("line %d: no time (NS, the fifth field): distances in time need every access timed", line)
		}
		if r.gov != nil && a.Time == 0 {
			return fmt.Errorf("line %d: no time (NS, the fifth field): the governor weighs traps against the CPU time every access gives", line)
		}
		r.Access(a)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", line+1, err)
	}
	r.Finish()
	return nil
}
