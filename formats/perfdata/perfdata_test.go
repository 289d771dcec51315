package perfdata

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

var put = binary.LittleEndian

const st = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_ADDR

func attr(config uint64) []byte {
	return perffile.Attr(unix.PERF_TYPE_SOFTWARE, config, 1, st, true, 0)
}

// sample is a sample of this layout: identifier, pid/tid, time, addr.
func sample(id, time, addr uint64) []byte {
	b := make([]byte, 8+32)
	put.PutUint32(b, perfrecord.TypeSample)
	put.PutUint16(b[6:], uint16(len(b)))
	put.PutUint64(b[8:], id)
	put.PutUint32(b[16:], 7)
	put.PutUint32(b[20:], 8)
	put.PutUint64(b[24:], time)
	put.PutUint64(b[32:], addr)
	return b
}

func userRecord(typ uint32, body []byte) []byte {
	b := make([]byte, 8, 8+len(body))
	put.PutUint32(b, typ)
	put.PutUint16(b[6:], uint16(8+len(body)))
	return append(b, body...)
}

// buildFile is a file of page-faults (ids 10, 11) and dummy (id 20) events.
func buildFile(records ...[]byte) []byte {
	return perffile.File([]perffile.Event{
		{Attr: attr(unix.PERF_COUNT_SW_PAGE_FAULTS), IDs: []uint64{10, 11}, Name: "page-faults:u"},
		{Attr: attr(unix.PERF_COUNT_SW_DUMMY), IDs: []uint64{20}, Name: "dummy:HG"},
	}, "node-7", records...)
}

func finishedRound() []byte { return userRecord(TypeFinishedRound, nil) }

// Two CPUs' buffers drained in rounds: each round's records are ordered
// per CPU only. Ordered releases them by time, holding back what a later
// round may still precede.
func TestOrderedFile(t *testing.T) {
	b := buildFile(
		sample(10, 300, 0xa), sample(11, 100, 0xb), // round 1: cpu0 then cpu1
		finishedRound(),
		sample(10, 400, 0xc), sample(11, 200, 0xd), // cpu1's 200 precedes round 1's 300
		finishedRound(),
		sample(11, 500, 0xe),
	)
	f, err := Open(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if f.Hostname != "node-7" || len(f.Names) != 2 || f.Names[0] != "page-faults:u" || f.Names[1] != "dummy:HG" || f.Pipe {
		t.Errorf("header: host %q names %q pipe %v", f.Hostname, f.Names, f.Pipe)
	}
	var times []uint64
	var s perfrecord.Sample
	if err := f.Ordered(func(rec []byte) error {
		i, err := f.Events.ForSample(rec)
		if err != nil || i != 0 {
			t.Errorf("event %d, %v", i, err)
		}
		if err := perfrecord.DecodeSample(rec, &f.Events.Layouts[i], &s); err != nil {
			t.Fatal(err)
		}
		times = append(times, s.Time)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{100, 200, 300, 400, 500}; !slicesEqual(times, want) {
		t.Errorf("order %v, want %v", times, want)
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Pipe mode: a 16-byte header, then the attrs as HEADER_ATTR records.
func TestPipeMode(t *testing.T) {
	var p bytes.Buffer
	p.Write(put.AppendUint64(put.AppendUint64(nil, magic), pipeHeaderSize))
	p.Write(userRecord(TypeHeaderAttr, put.AppendUint64(attr(unix.PERF_COUNT_SW_PAGE_FAULTS), 5)))
	p.Write(userRecord(TypeHeaderAttr, put.AppendUint64(attr(unix.PERF_COUNT_SW_CPU_CLOCK), 6)))
	p.Write(sample(6, 10, 0x1000))
	stream := append([]byte(nil), p.Bytes()...)
	f, err := Open(io.MultiReader(&p)) // a stream, not a file
	if err != nil {
		t.Fatal(err)
	}
	rec, err := f.Next()
	if err != nil {
		t.Fatal(err)
	}
	if i, err := f.Events.ForSample(rec); err != nil || i != 1 || f.Names[1] != "cpu-clock" || !f.Pipe {
		t.Errorf("event %d (%v), names %q", i, err, f.Names)
	}
	if _, err := f.Next(); err != io.EOF {
		t.Errorf("end of stream: %v", err)
	}
	// An *os.File on a pipe (standard input) reads as a stream, though it
	// has a ReadAt that cannot seek.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() { pw.Write(stream); pw.Close() }()
	f, err = Open(pr)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := f.Next(); err != nil || len(rec) != 40 {
		t.Errorf("from a pipe: %d bytes, %v", len(rec), err)
	}
}

func TestMalformed(t *testing.T) {
	good := buildFile(sample(10, 1, 1), sample(11, 2, 2))
	truncated := good[:len(good)-1]
	// Cut the data section's second record in half: the file ends in it.
	dataOff := int(put.Uint64(good[40:]))
	cut := append([]byte(nil), good[:dataOff+40+20]...)
	compressed := buildFile(sample(10, 1, 1), userRecord(TypeCompressed, make([]byte, 8)))
	swapped := append([]byte(nil), good...)
	binary.BigEndian.PutUint64(swapped, magic)
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"feature section cut": {truncated, "feature 12"},
		"record cut":          {cut, "feature index"},
		"compressed":          {compressed, "perf.data compressed records"},
		"big endian":          {swapped, "perf.data header of"}, // a big-endian magic on a little-endian header
		"not perf":            {[]byte("hello, world, this is text"), "not a perf.data file"},
	} {
		var got []uint64
		f, err := Open(bytes.NewReader(c.b))
		if err == nil {
			err = f.Ordered(func(rec []byte) error {
				got = append(got, put.Uint64(rec[24:]))
				return nil
			})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if name == "compressed" && len(got) != 1 {
			t.Errorf("the sample before the compressed record was not handed out: %v", got)
		}
	}
	// A record whose size runs past the data section's end: the records
	// before it are still handed out.
	bad := buildFile(sample(10, 1, 1), sample(11, 2, 2))
	put.PutUint16(bad[dataOff+40+6:], 48)
	f, err := Open(bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = f.Ordered(func([]byte) error { n++; return nil })
	if err == nil || !strings.Contains(err.Error(), "overrun the data section") || n != 1 {
		t.Errorf("record past the data section: %d records, %v", n, err)
	}
}

func FuzzOpen(f *testing.F) {
	f.Add(buildFile(sample(10, 300, 0xa), finishedRound(), sample(11, 100, 0xb)))
	f.Add(buildFile(idIndexRecord(2, [4]uint64{10, 0, 1, ^uint64(0)}), sample(10, 300, 0xa)))
	for _, name := range []string{"testdata/page-faults.data", "testdata/page-faults-big-endian.data"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	// perf record -z: samples in compressed records, a round between.
	f.Add(buildFile(zrecords(f, [][]byte{append(sample(10, 300, 0xa), sample(11, 100, 0xb)...), sample(10, 400, 0xc)},
		[][][]byte{{finishedRound()}}, 40, false)...))
	// Pipe mode, as a stream (perf record -o - | ...) and from a file.
	var p bytes.Buffer
	p.Write(put.AppendUint64(put.AppendUint64(nil, magic), pipeHeaderSize))
	p.Write(userRecord(TypeHeaderAttr, put.AppendUint64(attr(unix.PERF_COUNT_SW_PAGE_FAULTS), 5)))
	p.Write(userRecord(TypeHeaderAttr, put.AppendUint64(attr(unix.PERF_COUNT_SW_CPU_CLOCK), 6)))
	p.Write(sample(6, 10, 0x1000))
	f.Add(p.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		// Both ways a file comes: one that can be read at any offset,
		// and a stream (standard input), which pipe mode is read as.
		for _, r := range []io.Reader{bytes.NewReader(b), io.MultiReader(bytes.NewReader(b))} {
			file, err := Open(r)
			if err != nil {
				continue
			}
			var s perfrecord.Sample
			file.Ordered(func(rec []byte) error {
				if i, err := file.Events.ForSample(rec); err == nil {
					perfrecord.DecodeSample(rec, &file.Events.Layouts[i], &s)
				}
				return nil
			})
		}
	})
}

// A file perf 6.1 recorded on the development VM (perf record -a -e
// page-faults -c 1 -d --phys-data -W --data-page-size), with perf script's
// pid/tid, cpu, time and addr of it taken at the same time: the reader
// gives the same samples in the same order.
func TestRecordedFile(t *testing.T) {
	script, err := os.ReadFile("testdata/page-faults.script")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(script)), "\n")
	fh, err := os.Open("testdata/page-faults.data")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := Open(fh)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Events.Attrs) != 2 || f.Names[0] != "page-faults" || f.Names[1] != "dummy:HG" || f.Arch != "x86_64" {
		t.Errorf("events %q, arch %q", f.Names, f.Arch)
	}
	var got []string
	var s perfrecord.Sample
	if err := f.Ordered(func(rec []byte) error {
		if h, _ := perfrecord.ParseHeader(rec); h.Type != perfrecord.TypeSample {
			return nil
		}
		i, err := f.Events.ForSample(rec)
		if err != nil {
			return err
		}
		if err := perfrecord.DecodeSample(rec, &f.Events.Layouts[i], &s); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%5d/%-5d [%03d] %d.%09d: %16x", s.PID, s.TID, s.CPU, s.Time/1e9, s.Time%1e9, s.Addr))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples, perf script printed %d", len(got), len(want))
	}
	// perf report --header-only: "nrcpus online : 2", and each event's ids
	// one per CPU (perf record -a on 2 CPUs).
	if f.OpenedCPUs() != 2 || f.CPUsOnline != 2 {
		t.Errorf("events opened on %d CPUs of %d online, perf's header says 2 of 2", f.OpenedCPUs(), f.CPUsOnline)
	}
	for i := range got {
		if strings.TrimSpace(got[i]) != strings.TrimSpace(want[i]) {
			t.Fatalf("sample %d: %q, perf script %q", i, got[i], want[i])
		}
	}
}

// A recording cut right after its data section (a copy that stopped short)
// says it is truncated and where, instead of an EOF.
func TestTruncatedAfterData(t *testing.T) {
	b, err := os.ReadFile("testdata/page-faults.data")
	if err != nil {
		t.Fatal(err)
	}
	end := int64(binary.LittleEndian.Uint64(b[40:])) + int64(binary.LittleEndian.Uint64(b[48:]))
	_, err = Open(bytes.NewReader(b[:end]))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("perf.data is truncated: the file ends before entry 0 of the feature index at byte %d", end)) {
		t.Errorf("cut at %d: %v", end, err)
	}
}

// idIndexRecord is an ID_INDEX record: nr, then {id, idx, cpu, tid} each.
func idIndexRecord(nr uint64, entries ...[4]uint64) []byte {
	var r perffile.Record
	r.U64(nr)
	for _, e := range entries {
		r.U64(e[0]).U64(e[1]).U64(e[2]).U64(e[3])
	}
	return r.Bytes(TypeIDIndex, 0)
}

// The CPUs perf opened events on come from ID_INDEX, the CPUs online from
// NRCPUS: perf record started while one of 4 CPUs was offline lists 3;
// per-thread events (cpu -1) list none; an ID_INDEX whose nr overruns the
// record is left out, and the samples after it still read.
func TestOpenedCPUs(t *testing.T) {
	events := []perffile.Event{{Attr: attr(unix.PERF_COUNT_SW_PAGE_FAULTS), IDs: []uint64{10, 11, 12}, Name: "page-faults"}}
	const perThread = ^uint64(0)
	for _, c := range []struct {
		name  string
		index []byte
		want  int
	}{
		{"three of four", idIndexRecord(3, [4]uint64{10, 0, 0, perThread}, [4]uint64{11, 0, 1, perThread}, [4]uint64{12, 0, 3, perThread}), 3},
		{"per thread", idIndexRecord(1, [4]uint64{10, 0, perThread, 4242}), 0},
		{"nr overruns", idIndexRecord(9, [4]uint64{10, 0, 0, perThread}), 0},
		{"no id index", nil, 0},
	} {
		recs := [][]byte{sample(10, 100, 0xa)}
		if c.index != nil {
			recs = append([][]byte{c.index}, recs...)
		}
		f, err := Open(bytes.NewReader(perffile.FileOf(events, perffile.Host{Name: "n", CPUs: 4}, recs...)))
		if err != nil {
			t.Fatal(err)
		}
		var samples int
		if err := f.Ordered(func(rec []byte) error {
			if h, _ := perfrecord.ParseHeader(rec); h.Type == perfrecord.TypeSample {
				samples++
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if f.OpenedCPUs() != c.want || f.CPUsOnline != 4 || samples != 1 {
			t.Errorf("%s: opened on %d CPUs of %d online, %d samples; want %d of 4, 1", c.name, f.OpenedCPUs(), f.CPUsOnline, samples, c.want)
		}
	}
}

// perf's tsc_to_perf_time, by hand: count × mult >> shift, split so that
// it does not overflow, plus zero; with a short counter, the count is
// first taken relative to time_cycles within time_mask.
func TestTimeConv(t *testing.T) {
	tc := TimeConv{Shift: 4, Mult: 625, Zero: 1e9}
	// 1,000,003 × 625 / 16 = 39,062,617.1875
	if got := tc.Time(1000003); got != 1e9+39062617 {
		t.Errorf("time %d, want %d", got, uint64(1e9+39062617))
	}
	// 2^60 × 625 overflows 64 bits; (2^60 >> 10) × 625 = 703,687,441,776,640,000 does not.
	if got := (TimeConv{Shift: 10, Mult: 625}).Time(1 << 60); got != 703687441776640000 {
		t.Errorf("time of 2^60 counts: %d", got)
	}
	short := TimeConv{Mult: 1, Cycles: 0x1000, Mask: 0xffff, CapUserTimeShort: true}
	if got := short.Time(0x12345); got != 0x2345 {
		t.Errorf("short counter: %#x, want 0x2345", got)
	}
}

// testdata/page-faults-big-endian.data is page-faults.data as a
// big-endian host writes it (cmd/pmu_exporter's bigEndianCopy, which
// perf script reads to the same samples as the original): read here, its
// samples decode to the original's, field for field, in the same order.
func TestBigEndianFile(t *testing.T) {
	decoded := func(name string) []perfrecord.Sample {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Open(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out []perfrecord.Sample
		err = f.Ordered(func(rec []byte) error {
			h, _ := perfrecord.ParseHeader(rec)
			if h.Type != perfrecord.TypeSample {
				return nil
			}
			i, err := f.Events.ForSample(rec)
			if err != nil {
				return err
			}
			var s perfrecord.Sample
			if err := perfrecord.DecodeSample(rec, &f.Events.Layouts[i], &s); err != nil {
				return err
			}
			s.Read, s.Callchain, s.Raw = nil, nil, nil
			out = append(out, s)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}
	le, be := decoded("testdata/page-faults.data"), decoded("testdata/page-faults-big-endian.data")
	if len(le) == 0 || len(le) != len(be) {
		t.Fatalf("%d samples little-endian, %d big-endian", len(le), len(be))
	}
	for i := range le {
		a, b := le[i], be[i]
		if a.IP != b.IP || a.PID != b.PID || a.TID != b.TID || a.Time != b.Time || a.Addr != b.Addr || a.CPU != b.CPU ||
			a.Period != b.Period || a.Weight != b.Weight || a.DataSrc != b.DataSrc || a.PhysAddr != b.PhysAddr || a.DataPageSize != b.DataPageSize {
			t.Fatalf("sample %d: %+v, big-endian %+v", i, a, b)
		}
	}
}
