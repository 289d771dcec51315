package perfrecord

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// perf mem on Sapphire Rapids: the auxiliary leader and mem-loads share a
// buffer, both with IDENTIFIER, so each sample names its event first.
func TestEventsByIdentifier(t *testing.T) {
	st := uint64(pebsType)
	ev, err := NewEvents([]Attr{{SampleType: st, SampleIDAll: true}, {SampleType: st, SampleIDAll: true}}, [][]uint64{{76}, {77, 78}})
	if err != nil {
		t.Fatal(err)
	}
	if i, err := ev.ForSample(pebsRecord()); err != nil || i != 1 {
		t.Errorf("sample of id 77: event %d, %v", i, err)
	}
	// A LOST record with the trailer: pid/tid, time, id, cpu, identifier.
	var r perffile.Record
	r.U64(76) // id
	r.U64(12) // lost
	r.U32(10)
	r.U32(11)
	r.U64(5555) // time
	r.U64(76)   // id
	r.U32(3)    // cpu
	r.U32(0)
	r.U64(76) // identifier
	lost := r.Bytes(TypeLost, 0)
	if i, err := ev.ForRecord(lost); err != nil || i != 0 {
		t.Errorf("lost of id 76: event %d, %v", i, err)
	}
	sid, err := DecodeSampleID(lost, Layout{SampleType: st, SampleIDAll: true})
	if err != nil || sid != (SampleID{PID: 10, TID: 11, Time: 5555, ID: 76, CPU: 3}) {
		t.Errorf("trailer %+v %v", sid, err)
	}
	binary.LittleEndian.PutUint64(lost[len(lost)-8:], 99)
	if _, err := ev.ForRecord(lost); err == nil || !strings.Contains(err.Error(), "unknown event id 99") {
		t.Errorf("unknown id: %v", err)
	}
}

// Without IDENTIFIER the id sits after IP, TID, TIME and ADDR (perf's
// id_pos), and in the trailer before STREAM_ID and CPU.
func TestEventsByIDPosition(t *testing.T) {
	st := uint64(unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_ID | unix.PERF_SAMPLE_CPU)
	var attrs []Attr
	var ids [][]uint64
	for i := range 20 { // more than scanLimit: the map path
		attrs = append(attrs, Attr{SampleType: st, SampleIDAll: true})
		ids = append(ids, []uint64{uint64(100 + i)})
	}
	ev, err := NewEvents(attrs, ids)
	if err != nil {
		t.Fatal(err)
	}
	var r perffile.Record
	r.U64(0x1000) // ip
	r.U32(1)
	r.U32(2)
	r.U64(117) // id
	r.U32(0)
	r.U32(0)
	if i, err := ev.ForSample(r.Bytes(TypeSample, 0)); err != nil || i != 17 {
		t.Errorf("event %d, %v", i, err)
	}
	r = perffile.Record{}
	r.U64(0)
	r.U64(0)
	r.U64(0)   // throttle body: time, id, stream_id
	r.U32(1)   // trailer pid
	r.U32(2)   // tid
	r.U64(105) // id
	r.U32(1)   // cpu
	r.U32(0)
	if i, err := ev.ForRecord(r.Bytes(TypeThrottle, 0)); err != nil || i != 5 {
		t.Errorf("throttle: event %d, %v", i, err)
	}
}

func TestEventsRefused(t *testing.T) {
	withID := Attr{SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_ID}
	noID := Attr{SampleType: unix.PERF_SAMPLE_IP}
	shifted := Attr{SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_ID}
	for name, c := range map[string]struct {
		attrs []Attr
		ids   [][]uint64
		want  string
	}{
		"no id":       {[]Attr{noID, noID}, [][]uint64{{1}, {2}}, "carry the id at word -1"},
		"misplaced":   {[]Attr{withID, shifted}, [][]uint64{{1}, {2}}, "at word 2"},
		"duplicate":   {[]Attr{withID, withID}, [][]uint64{{1}, {1}}, "belongs to both"},
		"lists":       {[]Attr{withID}, nil, "id lists"},
		"unknown bit": {[]Attr{{SampleType: 1 << 40}}, [][]uint64{nil}, "bits 0x10000000000 are not ones this decoder knows"},
		"no regs":     {[]Attr{{SampleType: unix.PERF_SAMPLE_REGS_USER}}, [][]uint64{nil}, "sample_regs_user names no register"},
		"no intr":     {[]Attr{{SampleType: unix.PERF_SAMPLE_REGS_INTR}}, [][]uint64{nil}, "sample_regs_intr names no register"},
		"none":        {nil, nil, "no event attributes (perf_event_attr)"},
	} {
		if _, err := NewEvents(c.attrs, c.ids); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestParseAttr(t *testing.T) {
	b := make([]byte, 136)
	binary.LittleEndian.PutUint32(b, unix.PERF_TYPE_SOFTWARE)
	binary.LittleEndian.PutUint32(b[4:], 136)
	binary.LittleEndian.PutUint64(b[8:], unix.PERF_COUNT_SW_PAGE_FAULTS)
	binary.LittleEndian.PutUint64(b[16:], 4000)
	binary.LittleEndian.PutUint64(b[24:], unix.PERF_SAMPLE_IP|unix.PERF_SAMPLE_ADDR)
	binary.LittleEndian.PutUint64(b[40:], attrFreq|attrSampleIDAll|2<<attrPreciseIP)
	binary.LittleEndian.PutUint64(b[56:], 30) // config1: ldlat
	binary.LittleEndian.PutUint64(b[64:], 7)
	binary.LittleEndian.PutUint64(b[72:], unix.PERF_SAMPLE_BRANCH_ANY|unix.PERF_SAMPLE_BRANCH_HW_INDEX)
	binary.LittleEndian.PutUint64(b[80:], 0xff0fff) // sample_regs_user
	binary.LittleEndian.PutUint32(b[88:], 8192)     // sample_stack_user
	binary.LittleEndian.PutUint64(b[96:], 0x3)      // sample_regs_intr
	a, err := ParseAttr(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS, Period: 4000, Freq: true,
		SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_ADDR, SampleIDAll: true, PreciseIP: 2, Config1: 30, Config2: 7, RegsUser: 0xff0fff,
		BranchSampleType: unix.PERF_SAMPLE_BRANCH_ANY | unix.PERF_SAMPLE_BRANCH_HW_INDEX, StackUser: 8192, RegsIntr: 3}
	if a != want || a.Name() != "page-faults" {
		t.Errorf("%+v %s", a, a.Name())
	}
	// An attr of version 2 (80 bytes) has no sample_regs_user, and one
	// of version 1 (72) no branch_sample_type.
	binary.LittleEndian.PutUint32(b[4:], 80)
	if a, err := ParseAttr(b); err != nil || a.RegsUser != 0 || a.RegsIntr != 0 || a.BranchSampleType == 0 {
		t.Errorf("ver2 attr: %+v, err %v", a, err)
	}
	binary.LittleEndian.PutUint32(b[4:], 72)
	if a, err := ParseAttr(b); err != nil || a.BranchSampleType != 0 {
		t.Errorf("ver1 attr: %+v, err %v", a, err)
	}
	if _, err := ParseAttr(b[:40]); err == nil {
		t.Error("40-byte attr accepted")
	}
}
