package perfrecord

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Attr is what a decoder needs of a struct perf_event_attr: what the event
// counts (to name it and to know its period) and how its records are laid
// out. perf.data files store the whole attr; ParseAttr reads the fields
// below from it whatever attr version (size) the recorder wrote.
type Attr struct {
	Type                   uint32
	Config, Config1        uint64
	Config2                uint64
	Period                 uint64 // sample_period, or sample_freq when Freq
	Freq                   bool
	SampleType, ReadFormat uint64
	SampleIDAll            bool
	PreciseIP              uint8
	BPType                 uint32
	// RegsUser is sample_regs_user: which user registers a sample with
	// PERF_SAMPLE_REGS_USER dumps, by the architecture's perf register
	// number (attr version 3, 96 bytes, and later).
	RegsUser uint64
	// BranchSampleType is branch_sample_type (version 2, 80 bytes): which
	// branches PERF_SAMPLE_BRANCH_STACK records, and whether its records
	// carry the hardware index (PERF_SAMPLE_BRANCH_HW_INDEX) and counters
	// (PERF_SAMPLE_BRANCH_COUNTERS).
	BranchSampleType uint64
	// StackUser is sample_stack_user (version 3): how much user stack
	// PERF_SAMPLE_STACK_USER dumps.
	StackUser uint32
	// RegsIntr is sample_regs_intr (version 4, 104 bytes): the registers
	// PERF_SAMPLE_REGS_INTR dumps at the interrupt.
	RegsIntr uint64
}

// attrSizeVer0 is the first published struct perf_event_attr (64 bytes):
// every field ParseAttr needs except config2 (ver1, 72 bytes).
const attrSizeVer0 = 64

// The attr versions' sizes: version 2 adds branch_sample_type (at byte
// 72), 3 sample_regs_user and sample_stack_user (80, 88), 4
// sample_regs_intr (96).
const (
	attrSizeVer2 = 80
	attrSizeVer3 = 96
	attrSizeVer4 = 104
)

// Attr bits in the flags word.
const (
	attrFreq        = 1 << 10
	attrSampleIDAll = 1 << 18
	attrPreciseIP   = 15 // two bits
)

// ParseAttr reads a perf_event_attr from b, which holds at least its first
// size bytes (the attr's own size field, or len(b) when that is zero).
func ParseAttr(b []byte) (Attr, error) {
	if len(b) < attrSizeVer0 {
		return Attr{}, fmt.Errorf("perf_event_attr: %d bytes, want at least %d", len(b), attrSizeVer0)
	}
	size := int(le.Uint32(b[4:]))
	if size != 0 && size < attrSizeVer0 {
		return Attr{}, fmt.Errorf("perf_event_attr: size field %d is below the first version's %d", size, attrSizeVer0)
	}
	flags := le.Uint64(b[40:])
	a := Attr{
		Type:        le.Uint32(b),
		Config:      le.Uint64(b[8:]),
		Period:      le.Uint64(b[16:]),
		SampleType:  le.Uint64(b[24:]),
		ReadFormat:  le.Uint64(b[32:]),
		Freq:        flags&attrFreq != 0,
		SampleIDAll: flags&attrSampleIDAll != 0,
		PreciseIP:   uint8(flags>>attrPreciseIP) & 3,
		BPType:      le.Uint32(b[52:]),
		Config1:     le.Uint64(b[56:]),
	}
	if (size == 0 || size >= 72) && len(b) >= 72 {
		a.Config2 = le.Uint64(b[64:])
	}
	has := func(n int) bool { return (size == 0 || size >= n) && len(b) >= n }
	if has(attrSizeVer2) {
		a.BranchSampleType = le.Uint64(b[72:])
	}
	if has(attrSizeVer3) {
		a.RegsUser = le.Uint64(b[80:])
		a.StackUser = le.Uint32(b[88:])
	}
	if has(attrSizeVer4) {
		a.RegsIntr = le.Uint64(b[96:])
	}
	return a, nil
}

// Layout is the attr's record layout.
func (a Attr) Layout() Layout {
	return Layout{SampleType: a.SampleType, ReadFormat: a.ReadFormat, SampleIDAll: a.SampleIDAll, RegsUser: a.RegsUser,
		RegsIntr: a.RegsIntr, BranchSampleType: a.BranchSampleType}
}

// SamplePeriod is what a sample of the event stands for when it does not
// carry PERIOD: the fixed period, or 1 for a frequency.
func (a Attr) SamplePeriod() uint64 {
	if a.Freq {
		return 1
	}
	return a.Period
}

// Name is perf's spelling of the event where it has a fixed one
// (hardware, software and cache events), else type/config in perf's raw
// syntax.
func (a Attr) Name() string {
	switch a.Type {
	case unix.PERF_TYPE_HARDWARE:
		if a.Config < uint64(len(hardwareNames)) {
			return hardwareNames[a.Config]
		}
	case unix.PERF_TYPE_SOFTWARE:
		if a.Config < uint64(len(softwareNames)) && softwareNames[a.Config] != "" {
			return softwareNames[a.Config]
		}
	case unix.PERF_TYPE_RAW:
		return fmt.Sprintf("r%x", a.Config)
	}
	return fmt.Sprintf("%d/config=%#x/", a.Type, a.Config)
}

// The kernel's generic hardware and software events, as perf names them.
var (
	hardwareNames = []string{"cycles", "instructions", "cache-references", "cache-misses",
		"branch-instructions", "branch-misses", "bus-cycles", "stalled-cycles-frontend",
		"stalled-cycles-backend", "ref-cycles"}
	softwareNames = []string{"cpu-clock", "task-clock", "page-faults", "context-switches",
		"cpu-migrations", "minor-faults", "major-faults", "alignment-faults", "emulation-faults",
		"dummy", "bpf-output", "cgroup-switches"}
)
