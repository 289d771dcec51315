package perfrecord

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// speMemoryType is the layout of perf's synthesized Arm SPE "memory"
// samples (perf record's sample id fields, then what arm-spe.c adds).
const speMemoryType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_WEIGHT |
	unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_PHYS_ADDR

// A synthesized sample is laid out field by field in perf_event.h's order,
// as the record built here by hand, and decodes to what it was made of.
func TestAppendSampleLayout(t *testing.T) {
	s := Sample{Misc: unix.PERF_RECORD_MISC_USER, ID: 1000000001, IP: 0x401010, PID: 4242, TID: 4243, Time: 5000,
		Addr: 0x555500000100, CPU: 3, Period: 1, Weight: 42, DataSrc: 0x1a00101042, PhysAddr: 0x812345100}
	var want perffile.Record
	want.U64(1000000001).U64(0x401010).U32(4242).U32(4243).U64(5000).U64(0x555500000100).U32(3).U32(0).U64(1).
		U64(42).U64(0x1a00101042).U64(0x812345100)
	l := Layout{SampleType: speMemoryType}
	got, err := AppendSample([]byte{0xee}, l, &s)
	if err != nil {
		t.Fatal(err)
	}
	if w := append([]byte{0xee}, want.Bytes(TypeSample, unix.PERF_RECORD_MISC_USER)...); !bytes.Equal(got, w) {
		t.Fatalf("appended\n% x\nwant\n% x", got, w)
	}
	var back Sample
	if err := DecodeSample(got[1:], &l, &back); err != nil {
		t.Fatal(err)
	}
	back.lastRF, back.fixed, back.Has, back.Read = 0, false, 0, nil
	if !reflect.DeepEqual(back, s) {
		t.Errorf("decoded %+v\nwant    %+v", back, s)
	}
	// WEIGHT_STRUCT and the other fixed fields round-trip too.
	l = Layout{SampleType: pebsType &^ unix.PERF_SAMPLE_READ}
	s = Sample{ID: 7, IP: 1, Time: 2, Addr: 3, CPU: 4, Period: 5, Weight: 312, InsnLatency: 9, DataSrc: 6, PhysAddr: 7, Cgroup: 8, DataPageSize: 4096}
	if got, err = AppendSample(nil, l, &s); err != nil {
		t.Fatal(err)
	}
	if err := DecodeSample(got, &l, &back); err != nil || back.Weight != 312 || back.InsnLatency != 9 || back.Cgroup != 8 || back.DataPageSize != 4096 || back.ID != 7 {
		t.Errorf("WEIGHT_STRUCT layout: %+v, %v", back, err)
	}
}

// Layouts with fields whose size varies, or a read, are refused, and
// nothing is appended.
func TestAppendSampleRefuses(t *testing.T) {
	for _, st := range []uint64{pebsType, unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_CALLCHAIN, unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_RAW,
		unix.PERF_SAMPLE_WEIGHT | unix.PERF_SAMPLE_WEIGHT_STRUCT} {
		b, err := AppendSample([]byte{1}, Layout{SampleType: st, ReadFormat: groupRead}, &Sample{})
		if err == nil || len(b) != 1 {
			t.Errorf("sample_type %#x: %d bytes, %v; want refused", st, len(b), err)
		}
	}
}

// An event's name where its config is beyond the kernel's generic events,
// as a damaged file may say, is the raw spelling (it indexed the name
// tables with a negative int before: found by FuzzEachSample).
func TestNameOfUnknownConfig(t *testing.T) {
	for _, a := range []Attr{{Type: unix.PERF_TYPE_HARDWARE, Config: 0xc830303030303030}, {Type: unix.PERF_TYPE_SOFTWARE, Config: 1 << 63}} {
		if got, want := a.Name(), fmt.Sprintf("%d/config=%#x/", a.Type, a.Config); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	if got := (Attr{Type: unix.PERF_TYPE_HARDWARE, Config: 1}).Name(); got != "instructions" {
		t.Errorf("hardware config 1: %q", got)
	}
}

// An AUX record is its offset, size and flags (perf_event.h); one cut
// short is an error.
func TestDecodeAux(t *testing.T) {
	var r perffile.Record
	r.U64(0x1000).U64(0x200).U64(AuxTruncated | AuxCollision)
	a, err := DecodeAux(r.Bytes(TypeAux, 0))
	if err != nil || a != (Aux{Offset: 0x1000, Size: 0x200, Flags: AuxTruncated | AuxCollision}) {
		t.Errorf("%+v, %v", a, err)
	}
	var short perffile.Record
	short.U64(0x1000)
	if _, err := DecodeAux(short.Bytes(TypeAux, 0)); err == nil {
		t.Error("an AUX record without its size and flags decoded")
	}
}
