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

	"github.com/pmu-exporter/pmu_exporter/comm/addrmap"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
)

//go:noinline
func probe(x int) int { return x*3 + 1 }

// selfMaps reads this process's mappings (the test binary's own).
func selfMaps(t *testing.T) []addrmap.Mapping {
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

// The bytes and the function start come from the ELF file the process
// maps, and agree with the code in memory; the symbol is the function's.
func TestTextAndSymbolOfOwnCode(t *testing.T) {
	maps := addrmap.New()
	pid := uint32(os.Getpid())
	maps.Set(pid, selfMaps(t))
	m := New(maps, func(_ uint32, name string) (File, string, error) {
		f, err := os.Open(name)
		return f, name, err
	}, nil)
	defer m.Close()
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
	if len(b) < int(ip-start)+memop.MaxInsn {
		t.Errorf("%d bytes, want through %d past ip", len(b), memop.MaxInsn)
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
	b := load(f)
	defer f.Close()
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
		if got := b.dwarfSource(pc); got == fmt.Sprintf("%s:%d", file, line) {
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
