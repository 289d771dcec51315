// Package perfrecord decodes the records the kernel writes into a perf ring
// buffer, and perf.data files carry: PERF_RECORD_SAMPLE laid out by each
// event's sample_type and read_format, and the bookkeeping records (LOST,
// LOST_SAMPLES, THROTTLE, UNTHROTTLE, SWITCH_CPU_WIDE, and MMAP/MMAP2 that
// name addresses). It is pure: bytes in, typed values out, into
// caller-owned structs so the hot path allocates nothing, and every
// malformed record is an error naming what is wrong.
package perfrecord

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"

	"golang.org/x/sys/unix"
)

// Record types (perf_event_header.type).
const (
	TypeMmap          = unix.PERF_RECORD_MMAP
	TypeComm          = unix.PERF_RECORD_COMM
	TypeMmap2         = unix.PERF_RECORD_MMAP2
	TypeLost          = unix.PERF_RECORD_LOST
	TypeThrottle      = unix.PERF_RECORD_THROTTLE
	TypeUnthrottle    = unix.PERF_RECORD_UNTHROTTLE
	TypeSample        = unix.PERF_RECORD_SAMPLE
	TypeLostSamples   = unix.PERF_RECORD_LOST_SAMPLES
	TypeSwitchCPUWide = unix.PERF_RECORD_SWITCH_CPU_WIDE
	TypeAux           = unix.PERF_RECORD_AUX
)

// HeaderSize is the size of struct perf_event_header.
const HeaderSize = 8

// Header is struct perf_event_header.
type Header struct {
	Type uint32
	Misc uint16
	Size uint16
}

// ParseHeader reads the header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("record header: %d bytes, want %d", len(b), HeaderSize)
	}
	h := Header{Type: le.Uint32(b), Misc: le.Uint16(b[4:]), Size: le.Uint16(b[6:])}
	if h.Size < HeaderSize || h.Size%8 != 0 {
		return h, fmt.Errorf("record type %d: size %d is not a multiple of 8 of at least %d", h.Type, h.Size, HeaderSize)
	}
	return h, nil
}

var le, be = binary.LittleEndian, binary.BigEndian

// supported are the sample_type bits the decoder lays out: every field
// of sampleFields.
var supported = fixedWords | unix.PERF_SAMPLE_READ | variable

// Layout is what decides a sample's layout: the event's sample_type and
// read_format, and whether other records carry a sample_id trailer.
type Layout struct {
	SampleType, ReadFormat uint64
	SampleIDAll            bool
	// RegsUser and RegsIntr are the attr's sample_regs_user and
	// sample_regs_intr, which lay out PERF_SAMPLE_REGS_USER and _INTR.
	RegsUser, RegsIntr uint64
	// BranchSampleType is the attr's branch_sample_type: whether a
	// PERF_SAMPLE_BRANCH_STACK has its hardware index and counters.
	BranchSampleType uint64
}

// Check refuses layouts the decoder cannot read.
func (l Layout) Check() error {
	if extra := l.SampleType &^ supported; extra != 0 {
		return fmt.Errorf("sample_type bits %#x are not ones this decoder knows (Linux 6.18 defines up to PERF_SAMPLE_CODE_PAGE_SIZE and AUX)", extra)
	}
	if l.SampleType&unix.PERF_SAMPLE_WEIGHT != 0 && l.SampleType&unix.PERF_SAMPLE_WEIGHT_STRUCT != 0 {
		return errors.New("sample_type has both WEIGHT and WEIGHT_STRUCT, which the kernel refuses")
	}
	if l.SampleType&unix.PERF_SAMPLE_REGS_USER != 0 && l.RegsUser == 0 {
		return errors.New("sample_type has REGS_USER but sample_regs_user names no register")
	}
	if l.SampleType&unix.PERF_SAMPLE_REGS_INTR != 0 && l.RegsIntr == 0 {
		return errors.New("sample_type has REGS_INTR but sample_regs_intr names no register")
	}
	return nil
}

// Sample is a decoded PERF_RECORD_SAMPLE. Fields the layout lacks are zero;
// Has says which are present (the sample_type bits).
type Sample struct {
	Has                     uint64
	Misc                    uint16
	ID, StreamID            uint64
	IP                      uint64
	PID, TID                uint32
	Time                    uint64
	Addr                    uint64
	CPU                     uint32
	Period                  uint64
	Weight                  uint64 // WEIGHT, or WEIGHT_STRUCT's var1_dw (access latency)
	InsnLatency, Var3Weight uint16 // WEIGHT_STRUCT's var2_w and var3_w
	DataSrc                 uint64
	Transaction             uint64
	PhysAddr                uint64
	Cgroup                  uint64
	DataPageSize            uint64
	CodePageSize            uint64
	// RegsABI is REGS_USER's abi (0: none dumped, the sample hit a kernel
	// thread; 2: 64-bit); Regs holds the dumped registers at their perf
	// register numbers (the other entries are zero) and RegsMask says which.
	RegsABI  uint64
	RegsMask uint64
	Regs     [64]uint64
	// BranchNr is BRANCH_STACK's number of entries, and Branches holds
	// them (24 bytes each: Branch reads one); BranchHWIndex is the
	// hardware's index where the layout has PERF_SAMPLE_BRANCH_HW_INDEX,
	// and BranchCounters a u64 per entry with PERF_SAMPLE_BRANCH_COUNTERS.
	BranchNr       int
	BranchHWIndex  uint64
	Branches       []byte
	BranchCounters []byte
	// StackUser is STACK_USER's dump of the user stack, and StackUserDyn
	// how much of it the kernel filled.
	StackUser    []byte
	StackUserDyn uint64
	// IntrABI is REGS_INTR's abi, and IntrRegs its registers (a u64 per
	// bit of IntrMask, in register number order: IntrReg reads one).
	IntrABI, IntrMask uint64
	IntrRegs          []byte
	// Aux is AUX's sampled data (an AUX area's snapshot at the sample).
	Aux []byte
	// Read holds the READ values (group members in order) with their ids,
	// and the times; it keeps its capacity between decodes.
	Read                 []ReadValue
	Enabled, Running     uint64
	Callchain, Raw       []byte // views into the record, valid until it is reused
	CallchainLen, RawLen int
	// lastRF is the read_format of the previous decode into this Sample
	// (Has its sample_type), fixed whether it took the fixed path: a
	// fixed layout is those two alone.
	lastRF uint64
	fixed  bool
}

// ReadValue is one value of PERF_SAMPLE_READ.
type ReadValue struct {
	Value, ID, Lost uint64
}

// DecodeSample decodes the record rec (header included) laid out by l into s.
func DecodeSample(rec []byte, l *Layout, s *Sample) error {
	h, err := ParseHeader(rec)
	if err != nil {
		return err
	}
	if h.Type != TypeSample {
		return fmt.Errorf("record type %d is not a sample", h.Type)
	}
	if int(h.Size) > len(rec) {
		return fmt.Errorf("sample: header says %d bytes, have %d", h.Size, len(rec))
	}
	body := rec[HeaderSize:h.Size]
	read := s.Read[:0]
	if n, ok := fixedSize(*l); ok && len(body) >= n {
		// A fixed layout writes every field it has: after a sample of the
		// same layout, nothing stale is left to clear.
		if s.Has != l.SampleType || s.lastRF != l.ReadFormat || !s.fixed {
			*s = Sample{Has: l.SampleType, lastRF: l.ReadFormat, fixed: true}
		}
		s.Misc = h.Misc
		s.Read = read
		decodeFixedFields(body, l.SampleType, l.ReadFormat, s)
		return nil
	}
	*s = Sample{Has: l.SampleType, Misc: h.Misc, lastRF: l.ReadFormat, Read: read}
	if err := decodeFields(body, l, s); err != nil {
		return fmt.Errorf("sample (sample_type %#x, %d bytes): %w", l.SampleType, h.Size, err)
	}
	return nil
}

// fixedSize is the body size of a layout without variable fields.
func fixedSize(l Layout) (int, bool) {
	st := l.SampleType
	if st&variable != 0 || (st&unix.PERF_SAMPLE_READ != 0 && l.ReadFormat&unix.PERF_FORMAT_GROUP != 0) {
		return 0, false
	}
	n := 8 * bits.OnesCount64(st&fixedWords)
	if st&unix.PERF_SAMPLE_READ != 0 {
		n += 8 * (1 + bits.OnesCount64(l.ReadFormat&(unix.PERF_FORMAT_TOTAL_TIME_ENABLED|
			unix.PERF_FORMAT_TOTAL_TIME_RUNNING|unix.PERF_FORMAT_ID|formatLost)))
	}
	return n, true
}

// Lost is PERF_RECORD_LOST (records the kernel dropped for a full buffer)
// or PERF_RECORD_LOST_SAMPLES (samples the PMU lost, ID zero).
type Lost struct {
	ID, Lost uint64
}

// DecodeLost decodes either lost record.
func DecodeLost(rec []byte) (Lost, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Lost{}, err
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	var l Lost
	switch h.Type {
	case TypeLost:
		l.ID, l.Lost = r.u64(), r.u64()
	case TypeLostSamples:
		l.Lost = r.u64()
	default:
		return l, fmt.Errorf("record type %d is not a lost record", h.Type)
	}
	if r.err != nil {
		return l, fmt.Errorf("lost record: %w", r.err)
	}
	return l, nil
}

// Aux is PERF_RECORD_AUX: the kernel wrote Size bytes of AUX data at
// Offset of the AUX area, with Flags saying what went wrong.
type Aux struct {
	Offset, Size, Flags uint64
}

// PERF_AUX_FLAG_*: the data was cut short (the AUX area was full: records
// lost), written in overwrite mode, has gaps, or collided with other data.
const (
	AuxTruncated = 0x01
	AuxOverwrite = 0x02
	AuxPartial   = 0x04
	AuxCollision = 0x08
)

// DecodeAux decodes an AUX record.
func DecodeAux(rec []byte) (Aux, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Aux{}, err
	}
	if h.Type != TypeAux {
		return Aux{}, fmt.Errorf("record type %d is not an AUX record", h.Type)
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	a := Aux{Offset: r.u64(), Size: r.u64(), Flags: r.u64()}
	if r.err != nil {
		return a, fmt.Errorf("AUX record: %w", r.err)
	}
	return a, nil
}

// Throttle is PERF_RECORD_THROTTLE or UNTHROTTLE: the kernel stopped (or
// resumed) an event that sampled faster than perf_event_max_sample_rate.
type Throttle struct {
	Time, ID, StreamID uint64
	Throttled          bool
}

// DecodeThrottle decodes either throttle record.
func DecodeThrottle(rec []byte) (Throttle, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Throttle{}, err
	}
	if h.Type != TypeThrottle && h.Type != TypeUnthrottle {
		return Throttle{}, fmt.Errorf("record type %d is not a throttle record", h.Type)
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	t := Throttle{Time: r.u64(), ID: r.u64(), StreamID: r.u64(), Throttled: h.Type == TypeThrottle}
	if r.err != nil {
		return t, fmt.Errorf("throttle record: %w", r.err)
	}
	return t, nil
}

// Switch is PERF_RECORD_SWITCH_CPU_WIDE: a context switch on the CPU, out
// of (Out) or into the task; PID and TID are the other side's.
type Switch struct {
	PID, TID uint32
	Out      bool
}

// DecodeSwitch decodes a CPU-wide switch record.
func DecodeSwitch(rec []byte) (Switch, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Switch{}, err
	}
	if h.Type != TypeSwitchCPUWide {
		return Switch{}, fmt.Errorf("record type %d is not a CPU-wide switch", h.Type)
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	s := Switch{PID: r.u32(), TID: r.u32(), Out: h.Misc&unix.PERF_RECORD_MISC_SWITCH_OUT != 0}
	if r.err != nil {
		return s, fmt.Errorf("switch record: %w", r.err)
	}
	return s, nil
}

// reader walks a record's body; the first overrun sets err and every later
// read returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format+" overruns the record", args...)
	}
	r.b = nil
}

func (r *reader) need(n int, what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) < n {
		r.fail("%s (%d bytes, %d left)", what, n, len(r.b))
		return false
	}
	return true
}

func (r *reader) u64() uint64 {
	if !r.need(8, "a u64") {
		return 0
	}
	v := le.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4, "a u32") {
		return 0
	}
	v := le.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2, "a u16") {
		return 0
	}
	v := le.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || !r.need(n, "a block") {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// regs reads REGS_USER: the abi, then one u64 per bit of mask (none when
// the abi is 0), each stored at its register number.
func (r *reader) regs(mask uint64, s *Sample) {
	s.RegsABI = r.u64()
	if s.RegsABI == 0 || r.err != nil {
		return
	}
	if n := bits.OnesCount64(mask); n > len(r.b)/8 {
		r.fail("%d user registers", n)
		return
	}
	s.RegsMask = mask
	for m := mask; m != 0; m &= m - 1 {
		s.Regs[bits.TrailingZeros64(m)] = r.u64()
	}
}

// align8 skips the padding after a block of n bytes that started 8-aligned.
func (r *reader) align8(n int) {
	if pad := (8 - n%8) % 8; pad > 0 {
		r.bytes(pad)
	}
}

// readFormat decodes struct read_format into out (reused).
func (r *reader) readFormat(rf uint64, out []ReadValue, enabled, running *uint64) []ReadValue {
	group := rf&unix.PERF_FORMAT_GROUP != 0
	n := uint64(1)
	if group {
		n = r.u64()
		per := 1 + bits.OnesCount64(rf&(unix.PERF_FORMAT_ID|formatLost))
		if n > uint64(len(r.b))/uint64(8*per) {
			r.fail("a read group of %d values", n)
			return out
		}
	}
	if rf&unix.PERF_FORMAT_TOTAL_TIME_ENABLED != 0 && group {
		*enabled = r.u64()
	}
	if rf&unix.PERF_FORMAT_TOTAL_TIME_RUNNING != 0 && group {
		*running = r.u64()
	}
	for i := uint64(0); i < n; i++ {
		var v ReadValue
		v.Value = r.u64()
		if !group {
			if rf&unix.PERF_FORMAT_TOTAL_TIME_ENABLED != 0 {
				*enabled = r.u64()
			}
			if rf&unix.PERF_FORMAT_TOTAL_TIME_RUNNING != 0 {
				*running = r.u64()
			}
		}
		if rf&unix.PERF_FORMAT_ID != 0 {
			v.ID = r.u64()
		}
		if rf&formatLost != 0 {
			v.Lost = r.u64()
		}
		out = append(out, v)
	}
	return out
}

// formatLost is PERF_FORMAT_LOST (Linux 6.0).
const formatLost = 1 << 4

// Mmap is PERF_RECORD_MMAP or MMAP2: a mapping of a process, which names
// the code and data addresses of its samples.
type Mmap struct {
	PID, TID         uint32
	Addr, Len, PgOff uint64
	Prot, Flags      uint32 // MMAP2 only
	Filename         string
}

// DecodeMmap decodes either mmap record; the file name ends at its NUL,
// before the padding and any sample_id trailer.
func DecodeMmap(rec []byte) (Mmap, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Mmap{}, err
	}
	if h.Type != TypeMmap && h.Type != TypeMmap2 {
		return Mmap{}, fmt.Errorf("record type %d is not an mmap record", h.Type)
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	m := Mmap{PID: r.u32(), TID: r.u32(), Addr: r.u64(), Len: r.u64(), PgOff: r.u64()}
	if h.Type == TypeMmap2 {
		r.bytes(24) // maj, min, ino, ino_generation, or the build id
		m.Prot, m.Flags = r.u32(), r.u32()
	}
	if r.err != nil {
		return m, fmt.Errorf("mmap record: %w", r.err)
	}
	name := r.b
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	m.Filename = string(name)
	return m, nil
}

// Comm is PERF_RECORD_COMM: a thread's name, set at exec (Exec) or by
// prctl(PR_SET_NAME).
type Comm struct {
	PID, TID uint32
	Name     string
	Exec     bool
}

// DecodeComm decodes a comm record; the name ends at its NUL, before the
// padding and any sample_id trailer.
func DecodeComm(rec []byte) (Comm, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Comm{}, err
	}
	if h.Type != TypeComm {
		return Comm{}, fmt.Errorf("record type %d is not a comm record", h.Type)
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	c := Comm{PID: r.u32(), TID: r.u32(), Exec: h.Misc&unix.PERF_RECORD_MISC_COMM_EXEC != 0}
	if r.err != nil {
		return c, fmt.Errorf("comm record: %w", r.err)
	}
	name := r.b
	for i, ch := range name {
		if ch == 0 {
			name = name[:i]
			break
		}
	}
	c.Name = string(name)
	return c, nil
}

// TypeCgroup is PERF_RECORD_CGROUP: a cgroup's id (what PERF_SAMPLE_CGROUP
// carries) and its path under the cgroup mount, which perf record
// --all-cgroups writes for each cgroup at start and as they are made.
const TypeCgroup = unix.PERF_RECORD_CGROUP

// Cgroup is a cgroup record's id and path.
type Cgroup struct {
	ID   uint64
	Path string
}

// DecodeCgroup decodes a cgroup record; the path ends at its NUL.
func DecodeCgroup(rec []byte) (Cgroup, error) {
	h, err := ParseHeader(rec)
	if err != nil {
		return Cgroup{}, err
	}
	if h.Type != TypeCgroup {
		return Cgroup{}, fmt.Errorf("record type %d is not a cgroup record", h.Type)
	}
	r := reader{b: rec[HeaderSize:min(int(h.Size), len(rec))]}
	c := Cgroup{ID: r.u64()}
	if r.err != nil {
		return c, fmt.Errorf("cgroup record: %w", r.err)
	}
	path, _, _ := bytes.Cut(r.b, []byte{0})
	c.Path = string(path)
	return c, nil
}

// AppendSample appends s as a PERF_RECORD_SAMPLE of layout l, as perf
// synthesizes the samples it makes from AUX data (perf_event__synthesize_sample),
// so that they go where the kernel's samples go. Only fixed layouts are
// written: a layout with a callchain, raw data, registers or a read is refused.
func AppendSample(b []byte, l Layout, s *Sample) ([]byte, error) {
	n, ok := fixedSize(l)
	if !ok || l.SampleType&unix.PERF_SAMPLE_READ != 0 {
		return b, fmt.Errorf("synthesize a sample of sample_type %#x: only fixed fields are written", l.SampleType)
	}
	if err := l.Check(); err != nil {
		return b, err
	}
	start := len(b)
	b = le.AppendUint32(b, TypeSample)
	b = le.AppendUint16(b, s.Misc)
	b = le.AppendUint16(b, uint16(HeaderSize+n))
	st := l.SampleType
	b = appendFields(b, st, s)
	if got := len(b) - start; got != HeaderSize+n {
		return b[:start], fmt.Errorf("synthesize a sample of sample_type %#x: wrote %d bytes, the layout has %d", st, got, HeaderSize+n)
	}
	return b, nil
}

// branchStack reads BRANCH_STACK: nr, the hardware index where bst (the
// attr's branch_sample_type) asks for it, nr entries of 24 bytes, and nr
// counters where bst asks for them. perf reads the index whenever the
// attr asks for it, and so does this (the kernel leaves it out of a
// sample with no branch stack at all, which perf does not expect either).
func (r *reader) branchStack(bst uint64, s *Sample) {
	n := r.u64()
	per := uint64(branchEntrySize)
	if bst&unix.PERF_SAMPLE_BRANCH_COUNTERS != 0 {
		per += 8
	}
	if n > uint64(len(r.b))/per {
		r.fail("a branch stack of %d entries", n)
		return
	}
	s.BranchNr = int(n)
	if bst&unix.PERF_SAMPLE_BRANCH_HW_INDEX != 0 {
		s.BranchHWIndex = r.u64()
	}
	s.Branches = r.bytes(int(n) * branchEntrySize)
	if bst&unix.PERF_SAMPLE_BRANCH_COUNTERS != 0 {
		s.BranchCounters = r.bytes(int(n) * 8)
	}
}

// branchEntrySize is struct perf_branch_entry's: from, to, and the flags.
const branchEntrySize = 24

// Branch is one entry of a branch stack (struct perf_branch_entry).
type Branch struct {
	From, To uint64
	Flags    BranchFlags
}

// Branch is entry i of the sample's branch stack (0 is the most recent).
func (s *Sample) Branch(i int) Branch {
	b := s.Branches[i*branchEntrySize:]
	return Branch{From: le.Uint64(b), To: le.Uint64(b[8:]), Flags: BranchFlags(le.Uint64(b[16:]))}
}

// IntrReg is REGS_INTR's value of register number reg, if it was dumped.
func (s *Sample) IntrReg(reg int) (uint64, bool) {
	if reg < 0 || reg > 63 || s.IntrMask&(1<<reg) == 0 || s.IntrRegs == nil {
		return 0, false
	}
	i := bits.OnesCount64(s.IntrMask & (1<<reg - 1))
	return le.Uint64(s.IntrRegs[8*i:]), true
}

// BranchFlags is the third word of struct perf_branch_entry, bit fields
// from the least significant bit as a little-endian kernel lays them out:
// mispred:1, predicted:1, in_tx:1, abort:1, cycles:16, type:4, spec:2,
// new_type:4, priv:3.
type BranchFlags uint64

func (f BranchFlags) field(shift, width uint) uint64 { return uint64(f) >> shift & (1<<width - 1) }

// Mispredicted, Predicted, InTx and Abort are the entry's one-bit flags.
func (f BranchFlags) Mispredicted() bool { return f.field(0, 1) != 0 }
func (f BranchFlags) Predicted() bool    { return f.field(1, 1) != 0 }
func (f BranchFlags) InTx() bool         { return f.field(2, 1) != 0 }
func (f BranchFlags) Abort() bool        { return f.field(3, 1) != 0 }

// Cycles is the cycles since the previous branch (0: not recorded).
func (f BranchFlags) Cycles() uint16 { return uint16(f.field(4, 16)) }

// Type is the branch's PERF_BR_* type, NewType its PERF_BR_NEW_* one (Type
// PERF_BR_EXTEND_ABI), Spec its PERF_BR_SPEC_* speculation outcome, and
// Priv its PERF_BR_PRIV_* privilege level.
func (f BranchFlags) Type() uint8    { return uint8(f.field(20, 4)) }
func (f BranchFlags) Spec() uint8    { return uint8(f.field(24, 2)) }
func (f BranchFlags) NewType() uint8 { return uint8(f.field(26, 4)) }
func (f BranchFlags) Priv() uint8    { return uint8(f.field(30, 3)) }

// branchExtendABI is PERF_BR_EXTEND_ABI: the type is in NewType.
const branchExtendABI = 15

// branchTypeNames and branchNewTypeNames are perf's names of the types
// (tools/perf/util/branch.c).
var (
	branchTypeNames    = [16]string{"N/A", "COND", "UNCOND", "IND", "CALL", "IND_CALL", "RET", "SYSCALL", "SYSRET", "COND_CALL", "COND_RET", "ERET", "IRQ", "SERROR", "NO_TX", ""}
	branchNewTypeNames = [16]string{"FAULT_ALGN", "FAULT_DATA", "FAULT_INST", "ARCH_1", "ARCH_2", "ARCH_3", "ARCH_4", "ARCH_5"}
)

// TypeName is the type as perf script prints it: "" for PERF_BR_UNKNOWN.
func (f BranchFlags) TypeName() string {
	switch t := f.Type(); t {
	case 0:
		return ""
	case branchExtendABI:
		return branchNewTypeNames[f.NewType()]
	default:
		return branchTypeNames[t]
	}
}

// AppendPerf appends the entry as perf script -F brstack prints it (perf
// 6.1: from/to/M, P or -/X or -/A or -/cycles/type), without the space
// perf puts after it.
func (b Branch) AppendPerf(out []byte) []byte {
	out = append(out, "0x"...)
	out = strconv.AppendUint(out, b.From, 16)
	out = append(out, "/0x"...)
	out = strconv.AppendUint(out, b.To, 16)
	pred := byte('-')
	switch {
	case b.Flags.Predicted():
		pred = 'P'
	case b.Flags.Mispredicted():
		pred = 'M'
	}
	flag := func(on bool, c byte) byte {
		if on {
			return c
		}
		return '-'
	}
	out = append(out, '/', pred, '/', flag(b.Flags.InTx(), 'X'), '/', flag(b.Flags.Abort(), 'A'), '/')
	out = strconv.AppendUint(out, uint64(b.Flags.Cycles()), 10)
	out = append(out, '/')
	return append(out, b.Flags.TypeName()...)
}
