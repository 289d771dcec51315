package perfrecord

import (
	"math/bits"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sampleField is one PERF_SAMPLE_* field of a sample record. sampleFields
// lists them in the order the kernel writes them (perf_output_sample), and
// is the one place a field is described: the decoder reads by it, the
// writer writes by it, and the supported and fixed-size masks follow from
// it. A field is added here, once: a row, and a kind where its shape is new.
// A row names where in Sample its value goes (an offset, not a function:
// a call per field cost the fixed layouts four times their decoding time).
type sampleField struct {
	bit  uint64
	kind fieldKind
	at   uintptr // the Sample field it fills (for kindTID: PID, with TID after it)
	// field is that field's name and bitName the bit's, for the fixed
	// decoder generated from this table (fixed_gen.go).
	field, bitName string
	// printed is what `pmu_exporter samples` prints of it (Printed): its
	// JSON names, comma-separated (kindTID: pid,tid), "" for none; hex
	// writes them as perf script writes addresses.
	printed string
	hex     bool
}

// fieldKind is a field's shape in the record.
type fieldKind uint8

const (
	kindU64          fieldKind = iota // one u64
	kindTID                           // pid and tid, u32 each
	kindCPU                           // cpu, u32, and a reserved u32
	kindWeightStruct                  // var1_dw (u32), var2_w and var3_w (u16 each)
	kindRead                          // the read_format's values: fixed unless a group
	kindCallchain                     // nr, then nr u64
	kindRaw                           // size (u32), the data, padded to 8 bytes
	kindRegs                          // abi, then a u64 per bit of the register mask
	kindBranchStack                   // nr, the hardware index (HW_INDEX), nr entries, nr counters (COUNTERS)
	kindStackUser                     // size, the stack, and its dynamic size where size is not 0
	kindRegsIntr                      // as kindRegs, by sample_regs_intr
	kindAux                           // size, then the data
)

// fixed says the kind is one u64 word in every record.
func (k fieldKind) fixed() bool { return k <= kindWeightStruct }

// numSampleFields is len(sampleFields), a constant: Sample holds a plan of
// them (a layout's, fixedPlan), and sampleFields names Sample's fields.
const numSampleFields = 25

var sampleFields = [numSampleFields]sampleField{
	{unix.PERF_SAMPLE_IDENTIFIER, kindU64, unsafe.Offsetof(Sample{}.ID), "ID", "PERF_SAMPLE_IDENTIFIER", "", false},
	{unix.PERF_SAMPLE_IP, kindU64, unsafe.Offsetof(Sample{}.IP), "IP", "PERF_SAMPLE_IP", "ip", true},
	{unix.PERF_SAMPLE_TID, kindTID, unsafe.Offsetof(Sample{}.PID), "PID", "PERF_SAMPLE_TID", "pid,tid", false},
	{unix.PERF_SAMPLE_TIME, kindU64, unsafe.Offsetof(Sample{}.Time), "Time", "PERF_SAMPLE_TIME", "time", false},
	{unix.PERF_SAMPLE_ADDR, kindU64, unsafe.Offsetof(Sample{}.Addr), "Addr", "PERF_SAMPLE_ADDR", "addr", true},
	{unix.PERF_SAMPLE_ID, kindU64, unsafe.Offsetof(Sample{}.ID), "ID", "PERF_SAMPLE_ID", "", false},
	{unix.PERF_SAMPLE_STREAM_ID, kindU64, unsafe.Offsetof(Sample{}.StreamID), "StreamID", "PERF_SAMPLE_STREAM_ID", "", false},
	{unix.PERF_SAMPLE_CPU, kindCPU, unsafe.Offsetof(Sample{}.CPU), "CPU", "PERF_SAMPLE_CPU", "cpu", false},
	{unix.PERF_SAMPLE_PERIOD, kindU64, unsafe.Offsetof(Sample{}.Period), "Period", "PERF_SAMPLE_PERIOD", "period", false},
	{unix.PERF_SAMPLE_READ, kindRead, 0, "", "PERF_SAMPLE_READ", "", false},
	{unix.PERF_SAMPLE_CALLCHAIN, kindCallchain, 0, "", "PERF_SAMPLE_CALLCHAIN", "", false},
	{unix.PERF_SAMPLE_RAW, kindRaw, 0, "", "PERF_SAMPLE_RAW", "", false},
	{unix.PERF_SAMPLE_BRANCH_STACK, kindBranchStack, 0, "", "PERF_SAMPLE_BRANCH_STACK", "", false},
	{unix.PERF_SAMPLE_REGS_USER, kindRegs, 0, "", "PERF_SAMPLE_REGS_USER", "", false},
	{unix.PERF_SAMPLE_STACK_USER, kindStackUser, 0, "", "PERF_SAMPLE_STACK_USER", "", false},
	{unix.PERF_SAMPLE_WEIGHT, kindU64, unsafe.Offsetof(Sample{}.Weight), "Weight", "PERF_SAMPLE_WEIGHT", "weight", false},
	// WEIGHT_STRUCT takes WEIGHT's place (a layout has one or the other).
	{unix.PERF_SAMPLE_WEIGHT_STRUCT, kindWeightStruct, 0, "", "PERF_SAMPLE_WEIGHT_STRUCT", "weight", false},
	{unix.PERF_SAMPLE_DATA_SRC, kindU64, unsafe.Offsetof(Sample{}.DataSrc), "DataSrc", "PERF_SAMPLE_DATA_SRC", "data_src", true},
	{unix.PERF_SAMPLE_TRANSACTION, kindU64, unsafe.Offsetof(Sample{}.Transaction), "Transaction", "PERF_SAMPLE_TRANSACTION", "", false},
	{unix.PERF_SAMPLE_REGS_INTR, kindRegsIntr, 0, "", "PERF_SAMPLE_REGS_INTR", "", false},
	{unix.PERF_SAMPLE_PHYS_ADDR, kindU64, unsafe.Offsetof(Sample{}.PhysAddr), "PhysAddr", "PERF_SAMPLE_PHYS_ADDR", "phys_addr", true},
	{unix.PERF_SAMPLE_CGROUP, kindU64, unsafe.Offsetof(Sample{}.Cgroup), "Cgroup", "PERF_SAMPLE_CGROUP", "", false},
	{unix.PERF_SAMPLE_DATA_PAGE_SIZE, kindU64, unsafe.Offsetof(Sample{}.DataPageSize), "DataPageSize", "PERF_SAMPLE_DATA_PAGE_SIZE", "", false},
	{unix.PERF_SAMPLE_CODE_PAGE_SIZE, kindU64, unsafe.Offsetof(Sample{}.CodePageSize), "CodePageSize", "PERF_SAMPLE_CODE_PAGE_SIZE", "", false},
	{unix.PERF_SAMPLE_AUX, kindAux, 0, "", "PERF_SAMPLE_AUX", "", false},
}

// u64At and u32At are the Sample fields at an offset sampleFields names.
func u64At(s *Sample, at uintptr) *uint64 { return (*uint64)(unsafe.Add(unsafe.Pointer(s), at)) }
func u32At(s *Sample, at uintptr) *uint32 { return (*uint32)(unsafe.Add(unsafe.Pointer(s), at)) }

// The masks that follow from sampleFields: the fixed one-word fields, and
// the variable ones (a group read aside, whose size the read_format says).
var fixedWords, variable = fieldMasks()

func fieldMasks() (fixed, variable uint64) {
	for _, f := range sampleFields {
		switch {
		case f.kind.fixed():
			fixed |= f.bit
		case f.kind != kindRead:
			variable |= f.bit
		}
	}
	return fixed, variable
}

// decodeFields decodes the fields of l's sample type from body, in the
// kernel's order, checking each against the bytes left.
func decodeFields(body []byte, l *Layout, s *Sample) error {
	st := l.SampleType
	r := reader{b: body}
	for i := range sampleFields {
		if f := &sampleFields[i]; st&f.bit != 0 {
			getField(&r, f, l, s)
		}
	}
	return r.err
}

// getField reads field f into s.
func getField(r *reader, f *sampleField, l *Layout, s *Sample) {
	switch f.kind {
	case kindU64:
		*u64At(s, f.at) = r.u64()
	case kindTID:
		*u32At(s, f.at) = r.u32()
		s.TID = r.u32()
	case kindCPU:
		*u32At(s, f.at) = r.u32()
		r.u32() // reserved
	case kindWeightStruct:
		s.Weight = uint64(r.u32())
		s.InsnLatency, s.Var3Weight = r.u16(), r.u16()
	case kindRead:
		s.Read = r.readFormat(l.ReadFormat, s.Read[:0], &s.Enabled, &s.Running)
	case kindCallchain:
		n := r.u64()
		if n > uint64(len(r.b))/8 {
			r.fail("callchain of %d entries", n)
			return
		}
		s.CallchainLen = int(n)
		s.Callchain = r.bytes(int(n) * 8)
	case kindRaw:
		n := r.u32()
		s.RawLen = int(n)
		s.Raw = r.bytes(int(n))
		r.align8(4 + int(n))
	case kindRegs:
		r.regs(l.RegsUser, s)
	case kindBranchStack:
		r.branchStack(l.BranchSampleType, s)
	case kindStackUser:
		if n := r.u64(); n > 0 {
			if n > uint64(len(r.b)) {
				r.fail("a user stack of %d bytes", n)
				return
			}
			s.StackUser = r.bytes(int(n))
			s.StackUserDyn = r.u64()
		}
	case kindRegsIntr:
		if s.IntrABI = r.u64(); s.IntrABI != 0 {
			n := bits.OnesCount64(l.RegsIntr)
			if n > len(r.b)/8 {
				r.fail("%d interrupt registers", n)
				return
			}
			s.IntrMask, s.IntrRegs = l.RegsIntr, r.bytes(8*n)
		}
	case kindAux:
		n := r.u64()
		if n > uint64(len(r.b)) {
			r.fail("AUX data of %d bytes", n)
			return
		}
		s.Aux = r.bytes(int(n))
	}
}

// trailerFields are the fields of the sample_id trailer the kernel appends
// to other records (sample_id_all), in the table's order but for
// IDENTIFIER, which the trailer puts last.
const trailerFields = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_ID |
	unix.PERF_SAMPLE_STREAM_ID | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_IDENTIFIER

// decodeTrailer reads the sample_id trailer of sample type st from b into
// s, by the table.
func decodeTrailer(b []byte, st uint64, s *Sample) error {
	r := reader{b: b}
	var identifier *sampleField
	for i := range sampleFields {
		f := &sampleFields[i]
		switch {
		case st&f.bit&trailerFields == 0:
		case f.bit == unix.PERF_SAMPLE_IDENTIFIER:
			identifier = f
		default:
			getField(&r, f, &Layout{}, s)
		}
	}
	if identifier != nil {
		getField(&r, identifier, &Layout{}, s)
	}
	return r.err
}

// appendFields writes the fixed fields of st from s, in the kernel's order.
func appendFields(b []byte, st uint64, s *Sample) []byte {
	for i := range sampleFields {
		f := &sampleFields[i]
		if st&f.bit == 0 {
			continue
		}
		switch f.kind {
		case kindU64:
			b = le.AppendUint64(b, *u64At(s, f.at))
		case kindTID:
			b = le.AppendUint32(le.AppendUint32(b, s.PID), s.TID)
		case kindCPU:
			b = le.AppendUint32(le.AppendUint32(b, s.CPU), 0)
		case kindWeightStruct:
			b = le.AppendUint16(le.AppendUint16(le.AppendUint32(b, uint32(s.Weight)), s.InsnLatency), s.Var3Weight)
		}
	}
	return b
}

// readOne decodes a non-group READ at o and returns the offset after it.
func (s *Sample) readOne(b []byte, o int, rf uint64) int {
	u64 := func() uint64 { v := le.Uint64(b[o:]); o += 8; return v }
	v := ReadValue{Value: u64()}
	if rf&unix.PERF_FORMAT_TOTAL_TIME_ENABLED != 0 {
		s.Enabled = u64()
	}
	if rf&unix.PERF_FORMAT_TOTAL_TIME_RUNNING != 0 {
		s.Running = u64()
	}
	if rf&unix.PERF_FORMAT_ID != 0 {
		v.ID = u64()
	}
	if rf&formatLost != 0 {
		v.Lost = u64()
	}
	s.Read = append(s.Read[:0], v)
	return o
}

// PrintedField is a sample field as `pmu_exporter samples` prints it: its
// JSON name and value, in hex where perf script writes an address.
type PrintedField struct {
	Name  string
	Value uint64
	Hex   bool
}

// Printed appends to out the fields of s that samples prints, in the
// table's order: the table says which and how, so that a field added to
// it is printed by adding its name there.
func (s *Sample) Printed(out []PrintedField) []PrintedField {
	for i := range sampleFields {
		f := &sampleFields[i]
		if s.Has&f.bit == 0 || f.printed == "" {
			continue
		}
		switch f.kind {
		case kindU64:
			out = append(out, PrintedField{f.printed, *u64At(s, f.at), f.hex})
		case kindTID:
			out = append(out, PrintedField{"pid", uint64(s.PID), false}, PrintedField{"tid", uint64(s.TID), false})
		case kindCPU:
			out = append(out, PrintedField{f.printed, uint64(s.CPU), f.hex})
		case kindWeightStruct:
			out = append(out, PrintedField{f.printed, s.Weight, f.hex})
		}
	}
	return out
}
