// Package perfrecord decodes the records the kernel writes into a perf ring
// buffer, and perf.data files carry: PERF_RECORD_SAMPLE laid out by each
// event's sample_type and read_format, and the bookkeeping records (LOST,
// LOST_SAMPLES, THROTTLE, UNTHROTTLE, SWITCH_CPU_WIDE, and MMAP/MMAP2 that
// name addresses). It is pure: bytes in, typed values out, into
// caller-owned structs so the hot path allocates nothing, and every
// malformed record is an error naming what is wrong.
package perfrecord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

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

var le = binary.LittleEndian

// supported are the sample_type bits this decoder lays out. User register
// dumps are laid out by the attr's sample_regs_user (Layout.RegsUser);
// interrupt registers, user stacks, branch stacks and AUX need more of the
// attr and are refused up front rather than misread.
// supported are the fields sampleFields decodes.
var supported = fixedWords | unix.PERF_SAMPLE_READ | variable

// Layout is what decides a sample's layout: the event's sample_type and
// read_format, and whether other records carry a sample_id trailer.
type Layout struct {
	SampleType, ReadFormat uint64
	SampleIDAll            bool
	// RegsUser is the attr's sample_regs_user, which lays out
	// PERF_SAMPLE_REGS_USER.
	RegsUser uint64
}

// Check refuses layouts the decoder cannot read.
func (l Layout) Check() error {
	if extra := l.SampleType &^ supported; extra != 0 {
		return fmt.Errorf("sample_type bits %#x (register, stack, branch or AUX dumps) are not supported", extra)
	}
	if l.SampleType&unix.PERF_SAMPLE_WEIGHT != 0 && l.SampleType&unix.PERF_SAMPLE_WEIGHT_STRUCT != 0 {
		return errors.New("sample_type has both WEIGHT and WEIGHT_STRUCT, which the kernel refuses")
	}
	if l.SampleType&unix.PERF_SAMPLE_REGS_USER != 0 && l.RegsUser == 0 {
		return errors.New("sample_type has REGS_USER but sample_regs_user names no register")
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
	// Read holds the READ values (group members in order) with their ids,
	// and the times; it keeps its capacity between decodes.
	Read                 []ReadValue
	Enabled, Running     uint64
	Callchain, Raw       []byte // views into the record, valid until it is reused
	CallchainLen, RawLen int
	// last is the layout of the previous decode into this Sample, fixed
	// whether it took the fixed path.
	last  Layout
	fixed bool
}

// ReadValue is one value of PERF_SAMPLE_READ.
type ReadValue struct {
	Value, ID, Lost uint64
}

// DecodeSample decodes the record rec (header included) laid out by l into s.
func DecodeSample(rec []byte, l Layout, s *Sample) error {
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
	if n, ok := fixedSize(l); ok && len(body) >= n {
		// A fixed layout writes every field it has: after a sample of the
		// same layout, nothing stale is left to clear.
		if s.Has != l.SampleType || s.last != l || !s.fixed {
			*s = Sample{Has: l.SampleType, last: l, fixed: true}
		}
		s.Misc = h.Misc
		s.Read = read
		decodeFixedFields(body, l, s)
		return nil
	}
	*s = Sample{Has: l.SampleType, Misc: h.Misc, last: l, Read: read}
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
