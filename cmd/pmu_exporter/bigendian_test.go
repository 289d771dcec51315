package main

import (
	bin "encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// bigEndianCopy writes the file-mode perf.data src as a big-endian host
// would have: header, attrs, ids and every kernel record in big-endian
// order (perfrecord's Swap functions, toward big-endian), perf's own
// records but FINISHED_ROUND left out, and no feature sections. perf
// reads such a file with its own swap code: perf script printing the same
// of both is what holds the conversion to the ABI.
func bigEndianCopy(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	le, be := bin.LittleEndian, bin.BigEndian
	if le.Uint64(b) != 0x32454c4946524550 || le.Uint64(b[8:]) != 104 {
		t.Fatalf("%s is not a little-endian perf.data in file mode", src)
	}
	attrSize := le.Uint64(b[16:])
	attrOff, attrLen := le.Uint64(b[24:]), le.Uint64(b[32:])
	dataOff, dataLen := le.Uint64(b[40:]), le.Uint64(b[48:])
	var attrs []perfrecord.Attr
	var ids [][]uint64
	out := make([]byte, 104)
	type entry struct{ attr, ids []byte }
	var entries []entry
	for off := attrOff; off < attrOff+attrLen; off += attrSize {
		e := b[off : off+attrSize]
		a, err := perfrecord.ParseAttr(e[:attrSize-16])
		if err != nil {
			t.Fatal(err)
		}
		idOff, idLen := le.Uint64(e[attrSize-16:]), le.Uint64(e[attrSize-8:])
		var list []uint64
		raw := append([]byte(nil), b[idOff:idOff+idLen]...)
		for i := 0; i < len(raw); i += 8 {
			list = append(list, le.Uint64(raw[i:]))
			be.PutUint64(raw[i:], le.Uint64(raw[i:]))
		}
		attrs, ids = append(attrs, a), append(ids, list)
		ab := append([]byte(nil), e[:attrSize-16]...)
		if err := perfrecord.SwapAttr(ab, false); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{ab, raw})
	}
	events, err := perfrecord.NewEvents(attrs, ids)
	if err != nil {
		t.Fatal(err)
	}
	var trailer uint64
	if attrs[0].SampleIDAll {
		trailer = attrs[0].SampleType
	}
	// The ids, then the attrs pointing at them, then the data.
	idAt := make([]uint64, len(entries))
	for i, e := range entries {
		idAt[i] = uint64(len(out))
		out = append(out, e.ids...)
	}
	newAttrOff := uint64(len(out))
	for i, e := range entries {
		out = append(out, e.attr...)
		out = be.AppendUint64(out, idAt[i])
		out = be.AppendUint64(out, uint64(len(e.ids)))
	}
	newDataOff := uint64(len(out))
	for off := dataOff; off < dataOff+dataLen; {
		h, err := perfrecord.ParseHeader(b[off:])
		if err != nil {
			t.Fatalf("record at %d: %v", off, err)
		}
		rec := append([]byte(nil), b[off:off+uint64(h.Size)]...)
		off += uint64(h.Size)
		switch {
		case h.Type == perfrecord.TypeSample:
			i, err := events.ForSample(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := perfrecord.SwapSample(rec[perfrecord.HeaderSize:], attrs[i].Layout(), false); err != nil {
				t.Fatalf("sample at %d: %v", off-uint64(h.Size), err)
			}
		case h.Type < 64:
			if err := perfrecord.SwapRecord(rec, trailer, false); err != nil {
				t.Fatalf("record at %d: %v", off-uint64(h.Size), err)
			}
		case h.Type == 68: // FINISHED_ROUND: no body
		default:
			continue
		}
		perfrecord.SwapHeader(rec)
		out = append(out, rec...)
	}
	// One feature section, the arch (HEADER_ARCH, bit 6: struct
	// perf_header_string, a u32 length and the NUL-padded name), indexed
	// right after the data.
	dataEnd := uint64(len(out))
	if f, closeFile, err := recorded.Open(src, nil); err == nil && f.Arch != "" {
		closeFile()
		name := make([]byte, (len(f.Arch)/64+1)*64)
		copy(name, f.Arch)
		section := be.AppendUint32(nil, uint32(len(name)))
		section = append(section, name...)
		out = be.AppendUint64(out, dataEnd+16)
		out = be.AppendUint64(out, uint64(len(section)))
		out = append(out, section...)
		be.PutUint64(out[72:], 1<<6)
	}
	be.PutUint64(out[0:], 0x32454c4946524550)
	be.PutUint64(out[8:], 104)
	be.PutUint64(out[16:], attrSize)
	be.PutUint64(out[24:], newAttrOff)
	be.PutUint64(out[32:], uint64(len(entries))*attrSize)
	be.PutUint64(out[40:], newDataOff)
	be.PutUint64(out[48:], dataEnd-newDataOff)
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSamplesOfBigEndianRecordings: the recordings of other machines and
// of this one (samples with callchains, user stacks and registers, group
// reads, PEBS weights, branch stacks), written as a big-endian host would
// have written them, print in perf script exactly what the originals
// print (perf's swap code judges the conversion), and samples prints the
// same of the big-endian copy.
func TestSamplesOfBigEndianRecordings(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	files, _ := filepath.Glob(filepath.Join(reference.Recordings(t), "perf.data.*"))
	dir := t.TempDir()
	for _, c := range []struct{ name, args string }{
		{"dwarf", "-e cpu-clock --call-graph dwarf"},
		{"registers", "-e cpu-clock --intr-regs=ax,bx,ip --user-regs=ax,sp,ip"},
		{"group", "-e {cpu-clock,task-clock}:S"},
	} {
		if os.Geteuid() != 0 {
			break
		}
		file := filepath.Join(dir, c.name+".data")
		args := append([]string{"record", "-q", "-c", "100000", "-o", file}, strings.Fields(c.args)...)
		args = append(args, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
		if out, err := exec.Command(perf, args...).CombinedOutput(); err != nil {
			t.Fatalf("perf %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		files = append(files, file)
	}
	for _, file := range files {
		if strings.Contains(file, "piped") {
			continue // pipe mode: its attrs are records, which the copy does not write
		}
		t.Run(filepath.Base(file), func(t *testing.T) {
			fields := recordedFields(t, file)
			want := perfScriptSamples(t, file, fields)
			swapped := filepath.Join(t.TempDir(), "big-endian.data")
			bigEndianCopy(t, file, swapped)
			if perfSees := perfScriptSamples(t, swapped, fields); fmt.Sprint(perfSees) != fmt.Sprint(want) {
				sameSamples(t, perfSees, want)
				t.Fatal("perf script reads the big-endian copy otherwise: the copy is wrong")
			}
			got, said := ourRecordedSamplesSaid(t, swapped, fields)
			sameSamples(t, got, want)
			if strings.Contains(file, "armv7") && !strings.Contains(said, "decoding armv7l instructions is not supported") {
				t.Errorf("the big-endian copy's arch feature was not read: samples said %q", said)
			}
			t.Logf("%d samples alike", len(want))
		})
	}
}
