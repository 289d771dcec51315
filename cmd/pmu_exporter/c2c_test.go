package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/cacheline"
	"github.com/pmu-exporter/pmu_exporter/datasrc"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// memSampleType is what perf c2c record asks of Intel's mem-loads and
// mem-stores.
const memSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_ID | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD |
	unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_WEIGHT_STRUCT

// c2cRecording is a perf c2c record file of the thesis' False-Sharing
// benchmark on a Skylake server: 4 threads atomically add (a PEBS load
// that hits a modified line in L3, then a store) to their own slot of one
// heap line with probability f, else to a shared counter on the next line.
// Every 50th access is sampled, with period 50.
func c2cRecording(t *testing.T, f float64) (path string, loads, stores int) {
	const heap, pid = 0x5555_0000_0000, 1000
	ldlat := perffile.Attr(4, 0x1cd, 50, memSampleType, true, 30)
	st := perffile.Attr(4, 0x2cd, 50, memSampleType, true, 0)
	var recs [][]byte
	var m perffile.Record
	m.U32(pid).U32(pid).U64(heap).U64(0x21000).U64(0).U64(0).U64(0).U64(0).U32(3).U32(2).Str("[heap]")
	recs = append(recs, m.Bytes(unix.PERF_RECORD_MMAP2, 0))
	load := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode()
	store := datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNA}.Encode()
	r := rand.New(rand.NewPCG(3, math.Float64bits(f)))
	time := uint64(1e9)
	for range 100000 {
		tid := uint32(r.IntN(4))
		addr := uint64(heap + 0x100 + cacheline.LineSize) // the shared counter
		if r.Float64() < f {
			addr = heap + 0x100 + 8*uint64(tid)
		}
		for k, id := range []uint64{1, 2} {
			time += 100
			if r.IntN(50) != 0 {
				continue
			}
			src := []uint64{load, store}[k]
			var s perffile.Record
			s.U64(id).U64(0x401000).U32(pid).U32(pid + 1 + tid).U64(time).U64(addr).U64(id).U32(tid).U32(0).U64(50).U32(120).U16(0).U16(0).U64(src) // weight comes before data_src
			recs = append(recs, s.Bytes(unix.PERF_RECORD_SAMPLE, 0))
			if k == 0 {
				loads++
			} else {
				stores++
			}
		}
	}
	b := perffile.File([]perffile.Event{{Attr: ldlat, IDs: []uint64{1}, Name: "cpu/mem-loads,ldlat=30/P"}, {Attr: st, IDs: []uint64{2}, Name: "cpu/mem-stores/P"}}, "skx", recs...)
	path = filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, loads, stores
}

// TestC2C: the report finds the falsely shared line at the top, its
// mapping, each thread's own slot offset, the sample totals, and the false
// share of the sharing at f within sampling error.
func TestC2C(t *testing.T) {
	const f = 0.7
	path, loads, stores := c2cRecording(t, f)
	var out, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", path, "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("c2c exited %d: %s", code, errb.String())
	}
	var r cacheline.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Totals.Loads != uint64(loads) || r.Totals.Stores != uint64(stores) || r.Totals.LocalHITM != uint64(loads) {
		t.Errorf("totals %+v, recorded %d loads and %d stores", r.Totals, loads, stores)
	}
	n := float64(loads+stores) - 8 // each thread's first touches of each line are not yet sharing
	got := float64(r.Totals.FalseSharing) / float64(r.Totals.FalseSharing+r.Totals.TrueSharing)
	if tol := 3 * math.Sqrt(f*(1-f)/n); math.Abs(got-f) > tol+0.01 {
		t.Errorf("false share %.4f, want %.2f ± %.4f", got, f, tol)
	}
	if len(r.Lines) != 2 {
		t.Fatalf("%d lines, want the slots' line and the counter's", len(r.Lines))
	}
	top := r.Lines[0]
	if top.Address != "0x555500000100" || top.Symbol != "[heap]+0x100" || top.PID != 1000 || len(top.Threads) != 4 {
		t.Fatalf("top line %+v", top)
	}
	for _, th := range top.Threads {
		k := int(th.TID) - 1001
		want := fmt.Sprint(8 * k) // PEBS gives no access width: the offset alone
		if th.Written != want || th.Read != want || len(th.CPUs) != 1 || th.CPUs[0] != k {
			t.Errorf("thread %d: read %q written %q cpus %v, want its own bytes %s on cpu %d", th.TID, th.Read, th.Written, th.CPUs, want, k)
		}
	}
	if r.Lines[1].FalseSharing != 0 || r.Lines[1].TrueSharing == 0 {
		t.Errorf("shared counter line %+v", r.Lines[1])
	}
	// The text report says the same.
	out.Reset()
	if code := run([]string{"c2c", "-i", path}, &out, &errb); code != 0 {
		t.Fatalf("c2c text exited %d", code)
	}
	if !strings.Contains(out.String(), "0x555500000100") || !strings.Contains(out.String(), "[heap]+0x100") ||
		!strings.Contains(out.String(), fmt.Sprintf("%d loads, %d stores", loads, stores)) {
		t.Errorf("text report:\n%s", out.String())
	}
}

// A file without memory samples is refused with what to record instead.
func TestC2CWithoutMemorySamples(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"c2c", "-i", "../../perfdata/testdata/page-faults.data"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "perf c2c record") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}
