package spe

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// perfDump is the start of a real SPE buffer, and its packets as perf
// printed them (perf report --dump-raw-trace of `perf record -e
// arm_spe/ts_enable=1,pa_enable=1/ dd ...`, in the message of Linux commit
// ffd3d18c20b8, "perf tools: Add ARM Statistical Profiling Extensions (SPE)
// support"): one whole record, then the start of the next.
var perfDump = []struct {
	off   int
	bytes string
	perf  string
}{
	{0x00, "49 00", "LD"},
	{0x02, "b2 c0 3b 29 0f 00 00 ff ff", "VA 0xffff00000f293bc0"},
	{0x0b, "b3 c0 eb 24 fb 00 00 00 80", "PA 0xfb24ebc0 ns=1"},
	{0x14, "9a 00 00", "LAT 0 XLAT"},
	{0x17, "42 16", "EV RETIRED L1D-ACCESS TLB-ACCESS"},
	{0x19, "b0 00 c4 15 08 00 00 ff ff", "PC 0xff00000815c400 el3 ns=1"},
	{0x22, "98 00 00", "LAT 0 TOT"},
	{0x25, "71 36 6c 21 2c 09 00 00 00", "TS 39395093558"},
	{0x2e, "49 00", "LD"},
	{0x30, "b2 80 3c 29", ""}, // cut off here
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dumpBytes(t testing.TB) []byte {
	var b []byte
	for _, p := range perfDump {
		b = append(b, unhex(t, p.bytes)...)
	}
	return b
}

// Each packet of perf's dump decodes at perf's offset to what perf
// printed for it, and the next starts where perf's next line does.
func TestPacketsAsPerfPrintedThem(t *testing.T) {
	b := dumpBytes(t)
	want := []Packet{
		{OpType, 1, 0},
		{Address, AddrVirtual, 0xffff00000f293bc0},
		{Address, AddrPhysical, 0x80000000fb24ebc0},
		{Counter, CountTranslation, 0},
		{Events, 0, EvRetired | EvL1DAccess | EvTLBAccess},
		{Address, AddrPC, 0xffff00000815c400},
		{Counter, CountTotal, 0},
		{Timestamp, 0, 39395093558},
		{OpType, 1, 0},
	}
	for i, w := range want {
		p, n, err := Next(b, perfDump[i].off)
		if err != nil || p != w || perfDump[i].off+n != perfDump[i+1].off {
			t.Errorf("at %#x (perf: %s): %+v, %d bytes, %v; want %+v, %d bytes", perfDump[i].off, perfDump[i].perf, p, n, err,
				w, perfDump[i+1].off-perfDump[i].off)
		}
	}
	if _, _, err := Next(b, 0x30); err != ErrShort {
		t.Errorf("the cut address packet: %v, want ErrShort", err)
	}
}

// The dump's record as perf's decoder reads it: a load of the kernel
// address 0xffff00000f293bc0 (bits 55:52 all ones: the top byte filled),
// physical 0xfb24ebc0, at PC 0xff00000815c400 in EL3 (perf fills the top
// byte for EL1 and EL2 only), ended by its timestamp; the next record,
// cut off, is left undecoded.
func TestRecordAsPerfReadsIt(t *testing.T) {
	b := dumpBytes(t)
	var got []Record
	n, err := Records(b, func(r *Record) { got = append(got, *r) })
	if err != nil || n != 0x2e || len(got) != 1 {
		t.Fatalf("%d records, %d bytes taken, %v; want 1 record of 0x2e bytes", len(got), n, err)
	}
	want := Record{Has: HasOp | HasVirtual | HasPhysical | HasTranslation | HasEvents | HasPC | HasTotal | HasTimestamp,
		PC: 0x00ff00000815c400, EL: 3, Virtual: 0xffff00000f293bc0, Physical: 0xfb24ebc0,
		Events: EvRetired | EvL1DAccess | EvTLBAccess, Class: OpLoadStore, Op: 0, Timestamp: 39395093558}
	if got[0] != want {
		t.Errorf("record %+v\nwant   %+v", got[0], want)
	}
	if !got[0].Load() || got[0].Store() {
		t.Errorf("perf printed LD: Load %v, Store %v", got[0].Load(), got[0].Store())
	}
}

// Records built from the packet layouts: a user-space store with a tagged
// data address, its PID in a context packet, a two-byte events packet and
// a Neoverse data source, ended by End where timestamps are off; then a
// kernel load (EL1, non-secure: the PC's top byte filled) after alignment
// padding, its counters behind extended headers.
func TestRecordsFromLayouts(t *testing.T) {
	b := unhex(t, ""+
		"49 01"+ // op type, class 1 (load/store), store
		"b2 40 12 34 56 78 aa 00 2a"+ // VA 0xaa7856341240, tag 0x2a
		"b0 10 32 54 76 98 aa 00 80"+ // PC 0xaa9876543210, EL0, non-secure
		"99 07 00"+ // issue latency 7
		"98 2a 00"+ // total latency 42
		"52 0c 04"+ // events, 2 bytes: L1D access and refill, remote access
		"43 0e"+ // data source: DRAM (Neoverse)
		"65 e8 03 00 00"+ // context (index 1): 1000
		"01"+ // end
		"00 00"+ // padding
		"49 00"+ // load
		"20 98 05 00"+ // counter by an extended header (index 0): total latency 5
		"b0 00 10 00 00 00 00 00 a0"+ // PC, EL1, non-secure
		"71 01 00 00 00 00 00 00 00") // timestamp 1
	var got []Record
	n, err := Records(b, func(r *Record) { got = append(got, *r) })
	if err != nil || n != len(b) || len(got) != 2 {
		t.Fatalf("%d records, %d of %d bytes, %v", len(got), n, len(b), err)
	}
	store := got[0]
	if !store.Store() || store.Virtual != 0xaa7856341240 || store.PC != 0xaa9876543210 || store.EL != 0 ||
		store.Issue != 7 || store.Total != 42 || store.Events != EvL1DAccess|EvL1DRefill|EvRemoteAccess ||
		store.Source != SourceDRAM || store.Context != 1000 || store.Has&HasTimestamp != 0 {
		t.Errorf("store record %+v", store)
	}
	load := got[1]
	if !load.Load() || load.PC != 0xff00000000001000 || load.EL != 1 || load.Total != 5 || load.Timestamp != 1 || load.Has&HasVirtual != 0 {
		t.Errorf("load record %+v", load)
	}
}

// Alignment padding (an extended header whose second byte is 0) runs to
// the next boundary of 2^(n+1) bytes from the buffer's start.
func TestAlignmentPadding(t *testing.T) {
	b := make([]byte, 16)
	b[3], b[4] = 0x23, 0x00 // align to 16
	if p, n, err := Next(b, 3); err != nil || p.Kind != Pad || n != 13 {
		t.Errorf("%+v, %d bytes, %v; want padding of 13 bytes to offset 16", p, n, err)
	}
	if _, _, err := Next(b[:15], 3); err != ErrShort {
		t.Errorf("padding past the buffer's end: %v, want ErrShort", err)
	}
}

// A header that names no packet is an error naming it and where; the
// records before it were delivered.
func TestBadHeader(t *testing.T) {
	b := append(dumpBytes(t)[:0x2e], 0x02, 0x00)
	var n int
	taken, err := Records(b, func(*Record) { n++ })
	var he *HeaderError
	if !errors.As(err, &he) || he.Offset != 0x2e || n != 1 || taken != 0x2e {
		t.Fatalf("%v (%d records, %d bytes); want a header error at 0x2e after one record", err, n, taken)
	}
	if !strings.Contains(err.Error(), "02") || !strings.Contains(err.Error(), "46") {
		t.Errorf("error %q should name the header 02 and byte 46", err)
	}
}

// Records never panics, and never claims more bytes than it was given.
func FuzzRecords(f *testing.F) {
	f.Add(dumpBytes(f))
	f.Add([]byte{0x20, 0x00, 0x21, 0xb2, 1, 2, 3, 4, 5, 6, 7, 8, 0x01})
	f.Add([]byte{0x2f, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, _ := Records(b, func(*Record) {})
		if n < 0 || n > len(b) {
			t.Fatalf("took %d of %d bytes", n, len(b))
		}
	})
}
