package memop

import (
	"encoding/hex"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// data_src words with only the operation set (PERF_MEM_OP_LOAD, _STORE,
// at bit 0 of mem_op: include/uapi/linux/perf_event.h).
const (
	srcLoad  = 0x02
	srcStore = 0x04
)

func preciseSample(ip, addr, src uint64, tid uint32, time uint64) *perfrecord.Sample {
	return &perfrecord.Sample{Has: unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_ADDR, PID: 1, TID: tid, IP: ip, Addr: addr, DataSrc: src, Time: time}
}

// The widths of sharebench's loop (loopHex, go tool objdump): lock xadd
// %r8, (%rax) at 0x4ccad6 (5 bytes, 8-byte operand) and mov (%rsi), %r8d at
// 0x4ccaf1 (3 bytes, 4-byte operand); 0x4ccac2 has no memory operand.
func TestPreciseWidth(t *testing.T) {
	code, _ := hex.DecodeString(loopHex)
	for _, c := range []struct {
		ip      uint64
		ipAfter bool
		src     uint64
		size    uint8
		ok      bool
		sized   bool
	}{
		{0x4ccad6, false, srcStore, 8, true, true},
		{0x4ccaf1, false, srcLoad, 4, true, true},
		{0x4ccadb, true, srcStore, 8, true, true}, // PEBS precise_ip 1: the IP after the add
		{0x4ccaf4, true, srcLoad, 4, true, true},
		{0x4ccac2, false, srcLoad, 0, true, false},                    // no memory operand at the IP: skid
		{0xffffffff81000000, false, srcLoad, 0, true, false},          // kernel code
		{0x4ccad6, false, 0x01 /* PERF_MEM_OP_NA */, 0, false, false}, // neither load nor store
	} {
		r, _ := NewResolver(loopCode{code}, "amd64")
		a, ok, sized := r.Precise(preciseSample(c.ip, 0x600680, c.src, 2, 1), 100, c.ipAfter)
		if ok != c.ok || sized != c.sized || a.Size != c.size {
			t.Errorf("ip %#x (after %v): ok %v sized %v size %d, want %v %v %d", c.ip, c.ipAfter, ok, sized, a.Size, c.ok, c.sized, c.size)
		}
		if ok && (a.Addr != 0x600680 || a.Store != (c.src == srcStore) || a.Period != 100) {
			t.Errorf("ip %#x: %+v: the record's address, operation and period are the access's", c.ip, a)
		}
		if want := map[bool]uint64{true: 1}[c.sized]; ok && (r.Widths[1] != want || r.Widths[0] != 1-want) {
			t.Errorf("ip %#x: widths counted %v", c.ip, r.Widths)
		}
	}
}

// What the width changes: thread 2's 8-byte store at the line's start,
// then thread 3's 4-byte load of bytes 4..7 of it, is true sharing; with
// the record alone (one byte at each address) it would be false sharing.
func TestPreciseWidthDecidesSharing(t *testing.T) {
	code, _ := hex.DecodeString(loopHex)
	r, _ := NewResolver(loopCode{code}, "amd64")
	det := comdetect.New(comdetect.Options{Window: comdetect.PreciseWindow})
	store, _, _ := r.Precise(preciseSample(0x4ccad6, 0x600680, srcStore, 2, 1), 1, false)
	load, _, _ := r.Precise(preciseSample(0x4ccaf1, 0x600684, srcLoad, 3, 2), 1, false)
	det.Add(&store)
	if got := det.Add(&load).Kind; got != cacheline.TrueSharing {
		t.Errorf("sized: %v, want true sharing", got)
	}
	det = comdetect.New(comdetect.Options{Window: comdetect.PreciseWindow})
	store.Size, load.Size = 0, 0
	det.Add(&store)
	if got := det.Add(&load).Kind; got != cacheline.FalseSharing {
		t.Errorf("unsized: %v, want false sharing (one byte each)", got)
	}
}
