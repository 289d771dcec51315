package memop

import "github.com/pmu-exporter/pmu_exporter/formats/perfrecord"

// Trap is one watchpoint trap as kernel/watch reads it: the access to
// decode (Resolver.Trap) is the instruction at or before IP, on Regs.
type Trap struct {
	PID, TID, CPU uint32
	Slot          int
	IP            uint64 // the instruction after the trapping access (x86), or at it (arm64)
	Time          uint64 // CLOCK_MONOTONIC, ns
	// Watched is the address the watchpoint was armed on when it trapped
	// (PERF_SAMPLE_ADDR of a breakpoint): a trap read after its slot was
	// re-armed elsewhere names the old address.
	Watched uint64
	// Clock is the distance clock at the trap: the thread's CPU time, ns
	// (its task-clock), or the sum of the CountWith events.
	Clock uint64
	// Regs are the user registers at the trap (nil: none), valid during
	// the callback only.
	Regs *Regs
}

// Sampled is a watch engine's leader's sample of its thread (SampleEvery).
type Sampled struct {
	// Sample has the thread, CPU, time (CLOCK_MONOTONIC), IP and user
	// registers; valid during the callback only.
	Sample *perfrecord.Sample
	Clock  uint64 // the distance clock at the sample (as Trap.Clock)
}
