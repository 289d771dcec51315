package perfrecord

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// words is a sample record built word by word as the kernel writes it
// (perf_output_sample), header included.
func words(misc uint16, ws ...uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, TypeSample)
	b = binary.LittleEndian.AppendUint16(b, misc)
	b = binary.LittleEndian.AppendUint16(b, uint16(HeaderSize+8*len(ws)))
	for _, w := range ws {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// The layouts no machine here records, byte for byte from the ABI
// (include/uapi/linux/perf_event.h, perf_output_sample): a branch stack
// with the hardware index and counters, every flag of an entry, a user
// stack, interrupt registers and AUX data, in the kernel's order around
// the fixed fields; then the same stack without the index.
func TestDecodeBranchStackAndDumps(t *testing.T) {
	l := Layout{
		SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_BRANCH_STACK | unix.PERF_SAMPLE_REGS_USER |
			unix.PERF_SAMPLE_STACK_USER | unix.PERF_SAMPLE_WEIGHT | unix.PERF_SAMPLE_REGS_INTR | unix.PERF_SAMPLE_PHYS_ADDR | unix.PERF_SAMPLE_AUX,
		RegsUser:         1<<0 | 1<<8, // ax, ip
		RegsIntr:         1<<1 | 1<<2 | 1<<8,
		BranchSampleType: unix.PERF_SAMPLE_BRANCH_ANY | unix.PERF_SAMPLE_BRANCH_HW_INDEX | unix.PERF_SAMPLE_BRANCH_COUNTERS,
	}
	// Entry 0: mispredicted, in a transaction, 300 cycles, type CALL (4),
	// speculation 2, privilege 1. Entry 1: predicted, aborted, type
	// EXTEND_ABI (15) with new type FAULT_DATA (1).
	flags0 := uint64(1 | 1<<2 | 300<<4 | 4<<20 | 2<<24 | 1<<30)
	flags1 := uint64(1<<1 | 1<<3 | 15<<20 | 1<<26)
	rec := words(0,
		0x401000, // ip
		7<<32|7,  // pid, tid
		2,        // branch stack: nr
		9,        // hw_idx
		0x1000, 0x2000, flags0,
		0x3000, 0x4000, flags1,
		11, 12, // counters
		2, 0xa, 0x401000, // regs_user: abi, ax, ip
		16, 0x1111, 0x2222, 8, // stack_user: size, 16 bytes, dyn_size
		42,                      // weight
		2, 0xb, 0xc, 0xffff0000, // regs_intr: abi, dx... by mask order
		0x5000,        // phys_addr
		8, 0xdeadbeef, // aux: size, data
	)
	var s Sample
	if err := DecodeSample(rec, &l, &s); err != nil {
		t.Fatal(err)
	}
	if s.IP != 0x401000 || s.TID != 7 || s.Weight != 42 || s.PhysAddr != 0x5000 || s.Regs[8] != 0x401000 || s.Regs[0] != 0xa {
		t.Errorf("fixed fields around the dumps: %+v", s)
	}
	if s.BranchNr != 2 || s.BranchHWIndex != 9 || binary.LittleEndian.Uint64(s.BranchCounters[8:]) != 12 {
		t.Fatalf("branch stack: nr %d, index %d, counters %x", s.BranchNr, s.BranchHWIndex, s.BranchCounters)
	}
	b0, b1 := s.Branch(0), s.Branch(1)
	if b0.From != 0x1000 || b0.To != 0x2000 || !b0.Flags.Mispredicted() || b0.Flags.Predicted() || !b0.Flags.InTx() || b0.Flags.Abort() ||
		b0.Flags.Cycles() != 300 || b0.Flags.Type() != 4 || b0.Flags.Spec() != 2 || b0.Flags.Priv() != 1 {
		t.Errorf("entry 0: %+v", b0)
	}
	if !b1.Flags.Predicted() || !b1.Flags.Abort() || b1.Flags.NewType() != 1 || b1.Flags.Cycles() != 0 {
		t.Errorf("entry 1: %+v", b1)
	}
	// perf 6.1's brstack: from/to/M|P|-/X|-/A|-/cycles/type name.
	if got := string(b0.AppendPerf(nil)) + " " + string(b1.AppendPerf(nil)); got != "0x1000/0x2000/M/X/-/300/CALL 0x3000/0x4000/P/-/A/0/FAULT_DATA" {
		t.Errorf("perf's form: %q", got)
	}
	if len(s.StackUser) != 16 || binary.LittleEndian.Uint64(s.StackUser[8:]) != 0x2222 || s.StackUserDyn != 8 {
		t.Errorf("user stack %x, dyn %d", s.StackUser, s.StackUserDyn)
	}
	if v, ok := s.IntrReg(8); s.IntrABI != 2 || !ok || v != 0xffff0000 {
		t.Errorf("interrupt registers: abi %d, ip %#x %v", s.IntrABI, v, ok)
	}
	if v, ok := s.IntrReg(2); !ok || v != 0xc {
		t.Errorf("interrupt register 2: %#x %v", v, ok)
	}
	if _, ok := s.IntrReg(0); ok {
		t.Error("register 0 was not dumped")
	}
	if len(s.Aux) != 8 || binary.LittleEndian.Uint32(s.Aux) != 0xdeadbeef {
		t.Errorf("aux %x", s.Aux)
	}

	// Without HW_INDEX and COUNTERS the entries follow nr; an empty user
	// stack is its size alone, and a kernel thread's registers their abi.
	l.BranchSampleType = unix.PERF_SAMPLE_BRANCH_ANY
	rec = words(0, 0x401000, 7<<32|7, 1, 0x1000, 0x2000, flags0, 0, 0, 42, 0, 0x5000, 0)
	if err := DecodeSample(rec, &l, &s); err != nil {
		t.Fatal(err)
	}
	if s.BranchNr != 1 || s.BranchHWIndex != 0 || s.Branch(0).To != 0x2000 || s.StackUser != nil || s.IntrRegs != nil || s.Weight != 42 || s.PhysAddr != 0x5000 || len(s.Aux) != 0 {
		t.Errorf("without the index: %+v", s)
	}
	// A stack of more entries than the record holds is refused, named.
	rec = words(0, 0x401000, 7<<32|7, 1000, 0x1000, 0x2000, flags0)
	if err := DecodeSample(rec, &l, &s); err == nil || !strings.Contains(err.Error(), "branch stack of 1000 entries") {
		t.Errorf("an overlong branch stack: %v", err)
	}
}

// A big-endian kernel allocates bit fields from the most significant bit:
// a branch entry's mispred is bit 63 of its flags word, cycles bits 44 to
// 59, type 40 to 43, spec 38 and 39, new_type 34 to 37, priv 31 to 33;
// an attr's freq (bit 10 here) is bit 53 there, sample_id_all (18) bit
// 45, and precise_ip (15, 2 bits) bits 47 and 48. Converted, each field
// keeps its value in the little-endian place.
func TestBigEndianBitFields(t *testing.T) {
	v := uint64(1)<<63 | 300<<44 | 4<<40 | 2<<38 | 1<<34 | 1<<31
	f := BranchFlags(branchFlagsFromBE(v))
	if !f.Mispredicted() || f.Predicted() || f.Cycles() != 300 || f.Type() != 4 || f.Spec() != 2 || f.NewType() != 1 || f.Priv() != 1 {
		t.Errorf("branch flags from %#x: %+v", v, f)
	}
	if back := branchFlagsToBE(uint64(f)); back != v {
		t.Errorf("back to big-endian: %#x, want %#x", back, v)
	}
	a := make([]byte, attrSizeVer0)
	binary.BigEndian.PutUint32(a, unix.PERF_TYPE_SOFTWARE)
	binary.BigEndian.PutUint32(a[4:], attrSizeVer0)
	binary.BigEndian.PutUint64(a[16:], 4000)
	binary.BigEndian.PutUint64(a[24:], unix.PERF_SAMPLE_IP|unix.PERF_SAMPLE_TID)
	binary.BigEndian.PutUint64(a[40:], 1<<53|1<<45|2<<47)
	if err := SwapAttr(a, true); err != nil {
		t.Fatal(err)
	}
	got, err := ParseAttr(a)
	if err != nil || !got.Freq || !got.SampleIDAll || got.PreciseIP != 2 || got.Period != 4000 || got.SampleType != unix.PERF_SAMPLE_IP|unix.PERF_SAMPLE_TID {
		t.Errorf("attr from big-endian: %+v, %v", got, err)
	}
}
