package main

import (
	"bufio"
	"bytes"
	encbin "encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/internal/groundtruth/accesses"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// textMapping is the executable mapping of this test binary: its start,
// end, file offset and path, from /proc/self/maps.
func textMapping(t *testing.T) (start, end, off uint64, path string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "r-xp" || fs[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		start, _ = strconv.ParseUint(lo, 16, 64)
		end, _ = strconv.ParseUint(hi, 16, 64)
		off, _ = strconv.ParseUint(fs[2], 16, 64)
		return start, end, off, exe
	}
	t.Fatalf("no executable mapping of %s in /proc/self/maps", exe)
	return
}

// A perf c2c recording (PEBS mem-loads and mem-stores at precise_ip 3)
// whose samples lie in code `comm` can read: this test binary's own store
// and load functions (internal/groundtruth/accesses), named by the
// recording's MMAP2 record. Thread 2's 8-byte store at a line's start and
// thread 3's 4-byte load of bytes 4..7 are true sharing only by the
// widths decoded from those instructions (the records carry none); a 4-byte load at byte 8 of another line after
// an 8-byte store at its start is false sharing.
func TestCommPreciseRecordingWidths(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the recording names x86-64 code")
	start, end, off, exe := textMapping(t)
	st, ld, err := accesses.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if st < start || ld < start || st >= end || ld >= end {
		t.Fatalf("functions at %#x, %#x outside the text mapping [%#x, %#x)", st, ld, start, end)
	}
	const pid = 4000
	attr := func(config, ldlat uint64) []byte {
		a := perffile.Attr(4, config, 1, perffile.C2CSampleType, true, ldlat)
		le := encbin.LittleEndian
		le.PutUint64(a[40:], le.Uint64(a[40:])|3<<15) // precise_ip = 3
		return a
	}
	trailer := func(r *perffile.Record, time uint64) {
		r.U32(pid).U32(pid).U64(time).U64(1).U32(0).U32(0).U64(1)
	}
	var mm perffile.Record
	mm.U32(pid).U32(pid).U64(start).U64(end - start).U64(off).U64(0).U64(0).U64(0).U32(5).U32(2).Str(exe)
	trailer(&mm, 10)
	recs := [][]byte{mm.Bytes(unix.PERF_RECORD_MMAP2, unix.PERF_RECORD_MISC_USER)}
	sample := func(id, ip uint64, tid uint32, time, addr, src uint64) {
		var s perffile.Record
		s.U64(id).U64(ip).U32(pid).U32(tid).U64(time).U64(addr).U64(id).U32(tid).U32(0).U64(1).U32(0).U16(0).U16(0).U64(src)
		recs = append(recs, s.Bytes(unix.PERF_RECORD_SAMPLE, unix.PERF_RECORD_MISC_USER))
	}
	const lineA, lineB = 0x7f0000001000, 0x7f0000001040
	const load, store = 0x02, 0x04 // PERF_MEM_OP_LOAD, _STORE
	sample(2, st, 2, 100, lineA, store)
	sample(1, ld, 3, 200, lineA+4, load)
	sample(2, st, 2, 300, lineB, store)
	sample(1, ld, 3, 400, lineB+8, load)
	data := filepath.Join(t.TempDir(), "c2c.data")
	file := perffile.FileOf([]perffile.Event{
		{Attr: attr(0x1cd, 30), IDs: []uint64{1}, Name: "cpu/mem-loads,ldlat=30/P"},
		{Attr: attr(0x2cd, 0), IDs: []uint64{2}, Name: "cpu/mem-stores/P"},
	}, perffile.Host{Name: "test", CPUs: 4}, recs...)
	if err := os.WriteFile(data, file, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"comm", "--format", "json", data}, &stdout, &stderr); code != 0 {
		t.Fatalf("comm: exit %d\n%s", code, stderr.String())
	}
	var r comdetect.ReportJSON
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || len(r.Processes) != 1 {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if d := r.Processes[0].Detections; d.True != 1 || d.False != 1 {
		t.Errorf("detections %+v, want one true sharing (the load inside the store's 8 bytes) and one false", d)
	}
}
