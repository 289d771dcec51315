package perfrecord

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// A PEBS load-latency sample as Sapphire Rapids' perf mem writes it: the
// fields in perf_event.h's order, a group read of the auxiliary leader and
// mem-loads, WEIGHT_STRUCT with the load and instruction latencies.
const pebsType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_ID | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_READ |
	unix.PERF_SAMPLE_WEIGHT_STRUCT | unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_PHYS_ADDR | unix.PERF_SAMPLE_CGROUP |
	unix.PERF_SAMPLE_DATA_PAGE_SIZE

const groupRead = unix.PERF_FORMAT_GROUP | unix.PERF_FORMAT_ID | unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING

func pebsRecord() []byte {
	var r perffile.Record
	r.U64(77)             // identifier
	r.U64(0x401a2b)       // ip
	r.U32(1234)           // pid
	r.U32(1240)           // tid
	r.U64(987654321)      // time
	r.U64(0x7ffd12345678) // addr
	r.U64(77)             // id
	r.U32(5)              // cpu
	r.U32(0)              // res
	r.U64(10007)          // period
	r.U64(2)              // read: nr
	r.U64(5000)           // time_enabled
	r.U64(4000)           // time_running
	r.U64(111)            // value 0
	r.U64(76)             // id 0
	r.U64(222)            // value 1
	r.U64(77)             // id 1
	r.U32(312)            // weight.var1_dw: load latency
	r.U16(9)              // var2_w: instruction latency
	r.U16(0)              // var3_w
	r.U64(0x68100142)     // data_src
	r.U64(0x1234567000)   // phys_addr
	r.U64(4242)           // cgroup id
	r.U64(4096)           // data_page_size
	return r.Bytes(TypeSample, unix.PERF_RECORD_MISC_USER|unix.PERF_RECORD_MISC_EXACT_IP)
}

func TestDecodePEBSLayout(t *testing.T) {
	l := Layout{SampleType: pebsType, ReadFormat: groupRead}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	var s Sample
	if err := DecodeSample(pebsRecord(), &l, &s); err != nil {
		t.Fatal(err)
	}
	if s.ID != 77 || s.IP != 0x401a2b || s.PID != 1234 || s.TID != 1240 || s.Time != 987654321 ||
		s.Addr != 0x7ffd12345678 || s.CPU != 5 || s.Period != 10007 || s.Weight != 312 || s.InsnLatency != 9 ||
		s.DataSrc != 0x68100142 || s.PhysAddr != 0x1234567000 || s.Cgroup != 4242 || s.DataPageSize != 4096 {
		t.Errorf("%+v", s)
	}
	if len(s.Read) != 2 || s.Read[1] != (ReadValue{Value: 222, ID: 77}) || s.Enabled != 5000 || s.Running != 4000 {
		t.Errorf("read %+v enabled %d running %d", s.Read, s.Enabled, s.Running)
	}
	if s.Misc&unix.PERF_RECORD_MISC_EXACT_IP == 0 {
		t.Error("misc lost")
	}
	// Decoding again reuses Read's storage: no allocation per record.
	rec := pebsRecord()
	if n := testing.AllocsPerRun(100, func() { DecodeSample(rec, &l, &s) }); n != 0 {
		t.Errorf("%v allocations per decode", n)
	}
}

// An IBS op sample (AMD): IP, TID, TIME, ADDR, CPU, PERIOD, DATA_SRC and
// RAW holding the IBS registers; RAW's u32 size and padding to 8 bytes.
func TestDecodeRawAndCallchain(t *testing.T) {
	st := uint64(unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_CALLCHAIN | unix.PERF_SAMPLE_RAW | unix.PERF_SAMPLE_DATA_SRC)
	var r perffile.Record
	r.U64(0xffffffff81000000)
	r.U64(2)
	r.U64(0xaaaa)
	r.U64(0xbbbb)
	r.U32(12) // raw size: 12 bytes, then 4 of padding (4+12 = 16)
	r.U32(0x01020304)
	r.U32(0x05060708)
	r.U32(0x090a0b0c)
	r.U64(0x42)
	var s Sample
	if err := DecodeSample(r.Bytes(TypeSample, 0), &Layout{SampleType: st}, &s); err != nil {
		t.Fatal(err)
	}
	if s.IP != 0xffffffff81000000 || s.CallchainLen != 2 || s.RawLen != 12 || s.Raw[0] != 4 || s.DataSrc != 0x42 {
		t.Errorf("%+v", s)
	}
}

func TestTruncatedAndRefused(t *testing.T) {
	rec := pebsRecord()
	l := Layout{SampleType: pebsType, ReadFormat: groupRead}
	var s Sample
	// Shorten the body and the header's size together: fields run out.
	short := append([]byte(nil), rec[:len(rec)-16]...)
	binary.LittleEndian.PutUint16(short[6:], uint16(len(short)))
	if err := DecodeSample(short, &l, &s); err == nil || !strings.Contains(err.Error(), "overruns the record") {
		t.Errorf("truncated: %v", err)
	}
	if err := DecodeSample(rec[:40], &l, &s); err == nil || !strings.Contains(err.Error(), "header says") {
		t.Errorf("cut: %v", err)
	}
	if err := (Layout{SampleType: unix.PERF_SAMPLE_REGS_USER}).Check(); err == nil {
		t.Error("register dumps accepted")
	}
	if _, err := ParseHeader([]byte{1, 0, 0, 0, 0, 0, 7, 0}); err == nil {
		t.Error("record size 7 accepted")
	}
}

func TestBookkeepingRecords(t *testing.T) {
	var r perffile.Record
	r.U64(9)
	r.U64(31)
	l, err := DecodeLost(r.Bytes(TypeLost, 0))
	if err != nil || l.ID != 9 || l.Lost != 31 {
		t.Errorf("lost %+v %v", l, err)
	}
	r = perffile.Record{}
	r.U64(5)
	l, err = DecodeLost(r.Bytes(TypeLostSamples, 0))
	if err != nil || l.Lost != 5 {
		t.Errorf("lost samples %+v %v", l, err)
	}
	r = perffile.Record{}
	r.U64(100)
	r.U64(7)
	r.U64(8)
	th, err := DecodeThrottle(r.Bytes(TypeThrottle, 0))
	if err != nil || !th.Throttled || th.Time != 100 || th.ID != 7 {
		t.Errorf("throttle %+v %v", th, err)
	}
	r = perffile.Record{}
	r.U32(300)
	r.U32(301)
	sw, err := DecodeSwitch(r.Bytes(TypeSwitchCPUWide, unix.PERF_RECORD_MISC_SWITCH_OUT))
	if err != nil || !sw.Out || sw.PID != 300 || sw.TID != 301 {
		t.Errorf("switch %+v %v", sw, err)
	}
}

// A timer sample with the user registers, as perf record -e cpu-clock:u
// --user-regs=ax,dx,sp,ip,r8 writes it on x86-64: the abi word, then the
// registers in the order of their bits (ax=0, dx=3, sp=7, ip=8, r8=16),
// then the cgroup after them.
const (
	regsType = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU |
		unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_CGROUP
	regsMask = 1<<0 | 1<<3 | 1<<7 | 1<<8 | 1<<16
)

func regsRecord(abi uint64) []byte {
	var r perffile.Record
	r.U64(0x401a2b) // ip
	r.U32(10)       // pid
	r.U32(11)       // tid
	r.U64(5000)     // time
	r.U32(1)        // cpu
	r.U32(0)
	r.U64(250000) // period
	r.U64(abi)
	if abi != 0 {
		for _, v := range []uint64{0xa0, 0xd3, 0x7ffc0000, 0x401a2b, 0x88} {
			r.U64(v)
		}
	}
	r.U64(99) // cgroup
	return r.Bytes(TypeSample, unix.PERF_RECORD_MISC_USER)
}

func TestDecodeUserRegisters(t *testing.T) {
	l := Layout{SampleType: regsType, RegsUser: regsMask}
	var s Sample
	if err := DecodeSample(regsRecord(2), &l, &s); err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{0: 0xa0, 3: 0xd3, 7: 0x7ffc0000, 8: 0x401a2b, 16: 0x88}
	for i, v := range s.Regs {
		if v != want[i] {
			t.Errorf("register %d = %#x, want %#x", i, v, want[i])
		}
	}
	if s.RegsABI != 2 || s.RegsMask != regsMask || s.Cgroup != 99 || s.Period != 250000 {
		t.Errorf("abi %d mask %#x cgroup %d period %d", s.RegsABI, s.RegsMask, s.Cgroup, s.Period)
	}
	// A sample of a kernel thread dumps no registers (abi 0): the fields
	// after it are where they would be without the registers.
	if err := DecodeSample(regsRecord(0), &l, &s); err != nil {
		t.Fatal(err)
	}
	if s.RegsABI != 0 || s.RegsMask != 0 || s.Regs[8] != 0 || s.Cgroup != 99 {
		t.Errorf("abi 0: abi %d mask %#x ip reg %#x cgroup %d", s.RegsABI, s.RegsMask, s.Regs[8], s.Cgroup)
	}
	// More registers promised than the record holds is an error.
	if err := DecodeSample(regsRecord(2), &Layout{SampleType: regsType, RegsUser: 1<<24 - 1}, &s); err == nil {
		t.Error("a record shorter than its register mask decoded")
	}
	if err := (Layout{SampleType: regsType}).Check(); err == nil {
		t.Error("REGS_USER without a mask passed Check")
	}
}

func FuzzDecodeSample(f *testing.F) {
	f.Add(pebsRecord(), uint64(pebsType), uint64(groupRead))
	f.Add([]byte{9, 0, 0, 0, 0, 0, 16, 0, 1, 2, 3, 4, 5, 6, 7, 8}, uint64(unix.PERF_SAMPLE_RAW|unix.PERF_SAMPLE_CALLCHAIN), uint64(0))
	f.Add(regsRecord(2), uint64(regsType), uint64(0))
	// A branch stack with index and counters, a user stack, interrupt
	// registers and AUX (TestDecodeBranchStackAndDumps's layout).
	branchType := uint64(unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_BRANCH_STACK | unix.PERF_SAMPLE_STACK_USER | unix.PERF_SAMPLE_REGS_INTR | unix.PERF_SAMPLE_AUX)
	f.Add(words(0, 0x401000, 1, 9, 0x1000, 0x2000, 3, 11, 8, 0x1111, 8, 2, 1, 2, 3, 8, 0xdead), branchType, uint64(0))
	f.Add(words(0, 0x401000, 1<<40, 9), branchType, uint64(0))
	f.Fuzz(func(t *testing.T, rec []byte, st, rf uint64) {
		l := Layout{SampleType: st, ReadFormat: rf, RegsUser: regsMask, RegsIntr: 0x107,
			BranchSampleType: unix.PERF_SAMPLE_BRANCH_HW_INDEX | unix.PERF_SAMPLE_BRANCH_COUNTERS}
		if l.Check() != nil {
			return
		}
		var s Sample
		// Turned big-endian and back, a record that converts is the
		// same record.
		if len(rec) >= HeaderSize {
			cp := append([]byte(nil), rec...)
			if SwapSample(cp[HeaderSize:], l, false) == nil {
				if err := SwapSample(cp[HeaderSize:], l, true); err != nil || string(cp) != string(rec) {
					t.Errorf("swapped twice: %x, want %x (%v)", cp, rec, err)
				}
			}
			SwapRecord(append([]byte(nil), rec...), st, true)
		}
		if DecodeSample(rec, &l, &s) == nil {
			for i := range s.BranchNr {
				s.Branch(i).AppendPerf(nil)
			}
			s.IntrReg(8)
		}
		DecodeLost(rec)
		DecodeThrottle(rec)
		DecodeSwitch(rec)
		DecodeMmap(rec)
		DecodeComm(rec)
		DecodeSampleID(rec, Layout{SampleType: st, SampleIDAll: true})
		if ev, err := NewEvents([]Attr{{SampleType: st, SampleIDAll: true}, {SampleType: st, SampleIDAll: true}}, [][]uint64{{1}, {2}}); err == nil {
			ev.ForSample(rec)
			ev.ForRecord(rec)
		}
	})
}

// What the writer writes from sampleFields the decoder reads back, field
// for field, for random fixed layouts and values; a field written out of
// the kernel's order would land in another's place (the hand-built records
// of the other tests hold the order to the ABI).
func TestWriterAndDecoderAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	fixedBits := []uint64{unix.PERF_SAMPLE_IDENTIFIER, unix.PERF_SAMPLE_IP, unix.PERF_SAMPLE_TID, unix.PERF_SAMPLE_TIME,
		unix.PERF_SAMPLE_ADDR, unix.PERF_SAMPLE_ID, unix.PERF_SAMPLE_STREAM_ID, unix.PERF_SAMPLE_CPU, unix.PERF_SAMPLE_PERIOD,
		unix.PERF_SAMPLE_WEIGHT_STRUCT, unix.PERF_SAMPLE_DATA_SRC, unix.PERF_SAMPLE_TRANSACTION,
		unix.PERF_SAMPLE_PHYS_ADDR, unix.PERF_SAMPLE_CGROUP, unix.PERF_SAMPLE_DATA_PAGE_SIZE, unix.PERF_SAMPLE_CODE_PAGE_SIZE}
	for range 2000 {
		var l Layout
		for _, b := range fixedBits {
			if r.IntN(2) == 0 {
				l.SampleType |= b
			}
		}
		in := Sample{Misc: 2, IP: r.Uint64(), PID: r.Uint32(), TID: r.Uint32(), Time: r.Uint64(), Addr: r.Uint64(),
			StreamID: r.Uint64(), CPU: r.Uint32(), Period: r.Uint64(), Weight: uint64(r.Uint32()), InsnLatency: uint16(r.Uint32()),
			Var3Weight: uint16(r.Uint32()), DataSrc: r.Uint64(), Transaction: r.Uint64(), PhysAddr: r.Uint64(), Cgroup: r.Uint64(),
			DataPageSize: r.Uint64(), CodePageSize: r.Uint64()}
		if l.SampleType&(unix.PERF_SAMPLE_IDENTIFIER|unix.PERF_SAMPLE_ID) != 0 {
			in.ID = r.Uint64()
		}
		rec, err := AppendSample(nil, l, &in)
		if err != nil {
			t.Fatalf("layout %#x: %v", l.SampleType, err)
		}
		var out Sample
		if err := DecodeSample(rec, &l, &out); err != nil {
			t.Fatalf("layout %#x: %v", l.SampleType, err)
		}
		want := Sample{Has: l.SampleType, Misc: in.Misc}
		for _, f := range []struct {
			bit      uint64
			dst, src any
		}{
			{unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_ID, &want.ID, in.ID}, {unix.PERF_SAMPLE_IP, &want.IP, in.IP},
			{unix.PERF_SAMPLE_TIME, &want.Time, in.Time}, {unix.PERF_SAMPLE_ADDR, &want.Addr, in.Addr},
			{unix.PERF_SAMPLE_STREAM_ID, &want.StreamID, in.StreamID}, {unix.PERF_SAMPLE_CPU, &want.CPU, in.CPU},
			{unix.PERF_SAMPLE_PERIOD, &want.Period, in.Period}, {unix.PERF_SAMPLE_WEIGHT_STRUCT, &want.Weight, in.Weight},
			{unix.PERF_SAMPLE_WEIGHT_STRUCT, &want.InsnLatency, in.InsnLatency}, {unix.PERF_SAMPLE_WEIGHT_STRUCT, &want.Var3Weight, in.Var3Weight},
			{unix.PERF_SAMPLE_DATA_SRC, &want.DataSrc, in.DataSrc}, {unix.PERF_SAMPLE_TRANSACTION, &want.Transaction, in.Transaction},
			{unix.PERF_SAMPLE_PHYS_ADDR, &want.PhysAddr, in.PhysAddr}, {unix.PERF_SAMPLE_CGROUP, &want.Cgroup, in.Cgroup},
			{unix.PERF_SAMPLE_DATA_PAGE_SIZE, &want.DataPageSize, in.DataPageSize}, {unix.PERF_SAMPLE_CODE_PAGE_SIZE, &want.CodePageSize, in.CodePageSize},
			{unix.PERF_SAMPLE_TID, &want.PID, in.PID}, {unix.PERF_SAMPLE_TID, &want.TID, in.TID},
		} {
			if l.SampleType&f.bit != 0 {
				reflect.ValueOf(f.dst).Elem().Set(reflect.ValueOf(f.src))
			}
		}
		got := out
		got.lastRF, got.fixed, got.Read = 0, false, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("layout %#x:\n got  %+v\n want %+v", l.SampleType, got, want)
		}
	}
}

// Decoding records of different layouts into one Sample leaves nothing of
// the previous record behind.
func TestReusedSampleHasNoStaleFields(t *testing.T) {
	l1 := Layout{SampleType: pebsType &^ unix.PERF_SAMPLE_READ}
	l2 := Layout{SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID}
	var r1 perffile.Record
	r1.U64(7).U64(0x10).U32(1).U32(2).U64(3).U64(0x20).U64(7).U32(4).U32(0).U64(5).U32(6).U16(7).U16(8).U64(9).U64(10).U64(11).U64(12)
	var r2 perffile.Record
	r2.U64(0x30).U32(13).U32(14)
	rec1, rec2 := r1.Bytes(TypeSample, 0), r2.Bytes(TypeSample, 0)
	var reused, fresh Sample
	for _, c := range []struct {
		rec []byte
		l   Layout
	}{{rec1, l1}, {rec1, l1}, {rec2, l2}, {rec1, l1}, {rec2, l2}, {rec2, l2}} {
		if err := DecodeSample(c.rec, &c.l, &reused); err != nil {
			t.Fatal(err)
		}
		fresh = Sample{}
		if err := DecodeSample(c.rec, &c.l, &fresh); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(reused, fresh) {
			t.Fatalf("layout %#x: reused %+v, fresh %+v", c.l.SampleType, reused, fresh)
		}
	}
}

func TestDecodeComm(t *testing.T) {
	var r perffile.Record
	r.U32(41)
	r.U32(42)
	r.Str("worker")
	rec := r.Bytes(TypeComm, unix.PERF_RECORD_MISC_COMM_EXEC)
	c, err := DecodeComm(rec)
	if err != nil || c != (Comm{PID: 41, TID: 42, Name: "worker", Exec: true}) {
		t.Errorf("%+v %v", c, err)
	}
	if _, err := DecodeComm(rec[:12]); err == nil {
		t.Error("a comm record cut in its pid/tid decoded")
	}
}

// A cgroup record as the kernel writes it (perf_event_cgroup_output): the
// id, then the path NUL-padded to 8 bytes.
func TestDecodeCgroup(t *testing.T) {
	var r perffile.Record
	r.U64(0x1234)
	r.Str("/kubepods.slice/pod-a")
	rec := r.Bytes(TypeCgroup, 0)
	c, err := DecodeCgroup(rec)
	if err != nil || c != (Cgroup{ID: 0x1234, Path: "/kubepods.slice/pod-a"}) {
		t.Errorf("%+v %v", c, err)
	}
	if _, err := DecodeCgroup(rec[:12]); err == nil {
		t.Error("a cgroup record cut in its id decoded")
	}
	if _, err := DecodeCgroup(r.Bytes(TypeComm, 0)); err == nil {
		t.Error("a comm record decoded as a cgroup record")
	}
}
