// Package memop finds the data address a sampled instruction accesses
// without a precise PMU: a user-mode timer sample stops a thread at an
// instruction boundary and, with PERF_SAMPLE_REGS_USER, carries its
// registers there, so decoding the instruction's memory operand (with
// golang.org/x/arch) and evaluating base + index × scale + displacement on
// those registers gives the exact address, its width and whether the
// instruction loads, stores or both. It is pure: instruction bytes and
// registers in, an access out.
package memop

import "fmt"

// Kind is what an instruction does to its memory operand.
type Kind uint8

const (
	Load  Kind = 1 << iota // reads it
	Store                  // writes it
	// RMW reads and writes it (an arithmetic destination, xchg, a lock
	// prefixed instruction); it publishes like a store.
	RMW = Load | Store
)

func (k Kind) String() string {
	switch k {
	case Load:
		return "load"
	case Store:
		return "store"
	case RMW:
		return "rmw"
	}
	return "none"
}

// Reason says why no address came out of a sample. The order is the label
// order of pmu_sampling_unresolved_total.
type Reason uint8

const (
	Resolved    Reason = iota
	NoMemory           // the instruction accesses no data memory (arithmetic, lea, nop, prefetch, implicit stack)
	Segment            // fs/gs-relative: the segment base is not among the sampled registers
	Gather             // a gather or scatter: one address per vector lane
	String             // a string instruction (movs, stos, …): the address moves as it runs
	Undecodable        // the bytes are not an instruction the decoder knows
	Unreadable         // the code could not be read from the process or its file
	Kernel             // the sample is in kernel code
	JIT                // the code is in an anonymous executable mapping, which may change
	NoRegisters        // the sample carries no user registers
	Ambiguous          // a jump or an indirect branch lands at the IP: the code before it may not have run
	numReasons
)

// Reasons are the label values, by Reason.
var Reasons = [numReasons]string{"resolved", "no_memory_operand", "segment_relative", "gather", "string_instruction",
	"undecodable", "unreadable_code", "kernel", "jit", "no_registers", "ambiguous"}

func (r Reason) String() string {
	if int(r) < len(Reasons) {
		return Reasons[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// NumReasons is how many reasons there are.
const NumReasons = int(numReasons)

// NoReg marks an absent base or index.
const NoReg = -1

// Operand is an instruction's memory operand in the architecture's perf
// register numbers (the numbering of PERF_SAMPLE_REGS_USER).
type Operand struct {
	Reason Reason // Resolved when the fields below describe an access
	Kind   Kind
	// Atomic is a lock-prefixed instruction or xchg with memory (x86), or an
	// exclusive or atomic memory operation (arm64).
	Atomic bool
	Base   int8 // NoReg, or a register; PCRel uses the instruction's end (x86) or start (arm64)
	Index  int8
	Scale  uint8 // index multiplier (x86) or shift (arm64: 1 << Shift)
	PCRel  bool
	// PCFromStart: a PC-relative address counts from the instruction's
	// start (arm64), not its end (x86's RIP).
	PCFromStart bool
	// IndexExt extends the index before it is scaled (arm64 uxtw, sxtw).
	IndexExt IndexExt
	// AddrBits is the address size: 64, or 32 under an address-size
	// override (the sum wraps at 32 bits).
	AddrBits uint8
	Width    uint16 // bytes accessed
	Len      uint8  // instruction length in bytes
	Disp     int64
	// Writes are the general registers the instruction writes (bit n:
	// register n), which tell whether its operand can still be computed
	// from registers sampled after it ran.
	Writes uint64
	// Jump is a direct jump or conditional branch (no memory operand) to
	// the instruction's end plus Rel.
	Jump bool
	Rel  int64
	// Landing is endbr64 or endbr32: where an indirect branch lands, so the
	// instruction before it in the code may not have run.
	Landing bool
}

// Regs are a sample's user registers at their perf register numbers.
type Regs = [64]uint64

// Address computes the operand's address from the registers sampled when
// the instruction was about to run, at pc (its address).
func (o *Operand) Address(r *Regs, pc uint64) uint64 {
	var a uint64
	switch {
	case o.PCRel:
		a = pc
		if !o.PCFromStart {
			a += uint64(o.Len)
		}
	case o.Base != NoReg:
		a = r[o.Base]
	}
	if o.Index != NoReg {
		x := r[o.Index]
		switch o.IndexExt {
		case ExtUXTW:
			x = uint64(uint32(x))
		case ExtSXTW:
			x = uint64(int64(int32(x)))
		}
		a += x * uint64(o.Scale)
	}
	a += uint64(o.Disp)
	if o.AddrBits == 32 {
		a = uint64(uint32(a))
	}
	return a
}

// ReadsAfter reports whether the operand's registers are intact after the
// instruction ran, so that registers sampled at the next instruction still
// give its address.
func (o *Operand) ReadsAfter() bool {
	var used uint64
	if o.Base != NoReg && !o.PCRel {
		used |= 1 << o.Base
	}
	if o.Index != NoReg {
		used |= 1 << o.Index
	}
	return o.Reason == Resolved && used&o.Writes == 0
}
