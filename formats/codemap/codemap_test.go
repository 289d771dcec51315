package codemap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
)

//go:noinline
func probe(x int) int { return x*3 + 1 }

// selfMaps reads this process's mappings (the test binary's own).
func selfMaps(t testing.TB) []addrmap.Mapping {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []addrmap.Mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		se := strings.SplitN(fl[0], "-", 2)
		s, _ := strconv.ParseUint(se[0], 16, 64)
		e, _ := strconv.ParseUint(se[1], 16, 64)
		off, _ := strconv.ParseUint(fl[2], 16, 64)
		m := addrmap.Mapping{Start: s, End: e, PgOff: off}
		if len(fl) >= 6 {
			m.Name = fl[5]
		}
		out = append(out, m)
	}
	return out
}

// selfCodeMap is a Map of this process's mappings, reading their files,
// closed when the test ends; and this process's pid.
func selfCodeMap(tb testing.TB) (*Map, uint32) {
	maps := addrmap.New()
	pid := uint32(os.Getpid())
	maps.Set(pid, selfMaps(tb))
	m := New(maps, func(_ uint32, name string) (File, string, error) {
		f, err := os.Open(name)
		return f, name, err
	}, nil)
	tb.Cleanup(func() { m.Close() })
	return m, pid
}

// The bytes and the function start come from the ELF file the process
// maps, and agree with the code in memory; the symbol is the function's.
func TestTextAndSymbolOfOwnCode(t *testing.T) {
	m, pid := selfCodeMap(t)
	entry := uint64(reflect.ValueOf(probe).Pointer())
	ip := entry + 4
	start, b, r := m.Text(pid, ip, nil)
	if r != memop.Resolved {
		t.Fatalf("Text: %v", r)
	}
	if start != entry {
		t.Errorf("function start %#x, want probe's entry %#x", start, entry)
	}
	// The code in memory, read through /proc/self/mem (not the file).
	self, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	mem := make([]byte, len(b))
	if _, err := self.ReadAt(mem, int64(start)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, mem) {
		t.Errorf("bytes from the file differ from the code in memory")
	}
	// Through the function's end, where the runtime's own table says the
	// next one starts (the resolver looks there for loops' back edges to
	// ip).
	end := entry
	for f := runtime.FuncForPC(uintptr(end)); f != nil && f.Entry() == uintptr(entry) && end < entry+1<<16; f = runtime.FuncForPC(uintptr(end)) {
		end++
	}
	if size := end - entry; len(b) != max(int(size), int(ip-start)+memop.MaxInsn) {
		t.Errorf("%d bytes, want through the function's end (%d bytes) and at least %d past ip", len(b), size, memop.MaxInsn)
	}
	sym := m.Symbolize(pid, ip)
	file, line := runtime.FuncForPC(uintptr(ip)).FileLine(uintptr(ip)) // the runtime's own reading
	if !strings.HasSuffix(sym.Name, ".probe") || sym.Offset != 4 || sym.DSO == "" || sym.Source != file+":"+strconv.Itoa(line) {
		t.Errorf("Symbolize: %+v, want probe+0x4 at %s:%d", sym, file, line)
	}
	if _, _, r := m.Text(pid, 0xffffffff81000000, nil); r != memop.Kernel {
		t.Errorf("kernel address: %v", r)
	}
	if _, _, r := m.Text(pid, 8, nil); r != memop.Unreadable {
		t.Errorf("unmapped address: %v", r)
	}
	runtime.KeepAlive(probe(1))
}

// DWARF's line tables (what C and C++ binaries built with -g carry) give
// the same file:line as Go's own pclntab, on a Go binary built with both.
func TestDWARFLinesAgreeWithPclntab(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gofmt")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "cmd/gofmt")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	m := New(addrmap.New(), nil, nil)
	b := m.load(f)
	defer f.Close()
	// Its symbol table gives the functions; the pclntab waits for the
	// first source line asked for.
	if b.gotab != nil {
		t.Errorf("the pclntab of a binary with symbols was read before any source line was asked for")
	}
	m.source(b, b.syms[0].addr)
	if b.gotab == nil || len(b.syms) < 1000 {
		t.Fatalf("pclntab %v, %d functions", b.gotab != nil, len(b.syms))
	}
	var compared, agree int
	for i, s := range b.syms {
		if i%5 != 0 || s.size < 8 {
			continue
		}
		pc := s.addr + s.size/2
		file, line, _ := b.gotab.PCToLine(pc)
		compared++
		if got := m.dwarfSource(b, pc); got == fmt.Sprintf("%s:%d", file, line) {
			agree++
		} else if compared-agree <= 5 {
			t.Logf("%s+%#x: DWARF %s, pclntab %s:%d", s.name, pc-s.addr, got, file, line)
		}
	}
	t.Logf("DWARF agrees with pclntab on %d of %d addresses", agree, compared)
	if compared < 100 || agree*100 < compared*99 {
		t.Errorf("DWARF agrees with pclntab on %d of %d addresses", agree, compared)
	}
}

// countedFile records its closing.
type countedFile struct {
	*os.File
	closed *int
}

func (f countedFile) Close() error { *f.closed++; return f.File.Close() }

// A file stays open while some process maps it; once none does it waits
// for CloseIdle, and a process mapping it meanwhile takes it back without
// loading it again. Without this every binary a node ever ran stayed open.
func TestFilesClosedWhenNoProcessMapsThem(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	entry := uint64(reflect.ValueOf(probe).Pointer())
	var selfMap addrmap.Mapping
	for _, mp := range selfMaps(t) {
		if entry >= mp.Start && entry < mp.End {
			selfMap = mp
		}
	}
	maps := addrmap.New()
	// Processes 1 and 2 map file A, process 3 file B: the test binary
	// under two keys, as two files would be.
	for pid, name := range map[uint32]string{1: "/A", 2: "/A", 3: "/B", 4: "/A"} {
		mp := selfMap
		mp.Name = name
		maps.Set(pid, []addrmap.Mapping{mp})
	}
	opened, closed := map[string]int{}, 0
	m := New(maps, func(_ uint32, name string) (File, string, error) {
		f, err := os.Open(self)
		opened[name]++
		return countedFile{f, &closed}, name, err
	}, nil)
	defer m.Close()
	for _, pid := range []uint32{1, 2, 3} {
		if _, _, r := m.Text(pid, entry, nil); r != memop.Resolved {
			t.Fatalf("pid %d: %v", pid, r)
		}
	}
	// Each lookup of a new process opens its file to learn its key; a
	// file already loaded is closed again at once.
	if m.OpenFiles() != 2 || closed != 1 {
		t.Fatalf("after three processes: %d files open, %d closes; want 2 and 1", m.OpenFiles(), closed)
	}
	m.Forget(1)
	m.CloseIdle()
	if m.OpenFiles() != 2 || closed != 1 {
		t.Errorf("process 2 still maps A: %d files open, %d closes", m.OpenFiles(), closed)
	}
	m.Forget(2)
	m.Forget(3)
	if m.OpenFiles() != 2 || closed != 1 {
		t.Errorf("idle files are kept until CloseIdle: %d open, %d closes", m.OpenFiles(), closed)
	}
	// Process 4 maps A: the idle file is taken back, not loaded again.
	before := m.files["/A"]
	if _, _, r := m.Text(4, entry, nil); r != memop.Resolved || m.files["/A"] != before {
		t.Fatalf("process 4: %v, same binary %v", r, m.files["/A"] == before)
	}
	m.CloseIdle()
	if m.OpenFiles() != 1 || closed != 3 || m.files["/A"] == nil {
		t.Errorf("after CloseIdle: %d files open (A: %v), %d closes; want only A, which process 4 maps, and 3 closes", m.OpenFiles(), m.files["/A"] != nil, closed)
	}
	m.Forget(4)
	m.CloseIdle()
	if m.OpenFiles() != 0 || closed != 4 {
		t.Errorf("no process left: %d files open, %d closes", m.OpenFiles(), closed)
	}
}

// At most MaxIdle files wait for CloseIdle, the oldest closed first.
func TestIdleFilesBounded(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	entry := uint64(reflect.ValueOf(probe).Pointer())
	maps := addrmap.New()
	for _, mp := range selfMaps(t) {
		if entry >= mp.Start && entry < mp.End {
			for pid := uint32(1); pid <= MaxIdle+3; pid++ {
				mp.Name = fmt.Sprintf("/file%d", pid)
				maps.Set(pid, []addrmap.Mapping{mp})
			}
		}
	}
	closed := 0
	m := New(maps, func(_ uint32, name string) (File, string, error) {
		f, err := os.Open(self)
		return countedFile{f, &closed}, name, err
	}, nil)
	defer m.Close()
	for pid := uint32(1); pid <= MaxIdle+3; pid++ {
		if _, _, r := m.Text(pid, entry, nil); r != memop.Resolved {
			t.Fatalf("pid %d: %v", pid, r)
		}
		m.Forget(pid)
	}
	if m.OpenFiles() != MaxIdle || closed != 3 || m.files["/file1"] != nil || m.files["/file4"] == nil {
		t.Errorf("%d files open, %d closed (file1 open: %v, file4: %v); want %d open, the first 3 closed",
			m.OpenFiles(), closed, m.files["/file1"] != nil, m.files["/file4"] != nil, MaxIdle)
	}
}
