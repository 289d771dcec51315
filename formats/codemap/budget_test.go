package codemap

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/internal/hugeelf"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// cProgram compiles a C program with a symbol table (gcc, not stripped).
func cProgram(t *testing.T) string {
	t.Helper()
	gcc := testenv.RequireTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	if err := os.WriteFile(src, []byte("int f(int x) { return x * 3; }\nint main(void) { return f(0); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "p")
	if out, err := exec.Command(gcc, "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// A binary that declares a 256 MiB symbol table (sparse: its file takes a
// few KB of disk) costs the map no more than its budget: the table is not
// read, which is counted, and what the Go runtime allocated while the map
// took the binary in (its own count of allocations) stays within the
// budget. Before the budget, the whole table was read and parsed: over
// 700 MB of resident memory from a 16 KB file.
func TestDeclaredHugeSymbolTableIsNotRead(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64", "the program is patched as a little-endian ELF64 file")
	huge := hugeelf.Declare(t, cProgram(t), ".symtab", 256<<20)
	const budget = 8 << 20
	m := New(addrmap.New(), nil, nil)
	m.SetBudget(budget)
	f, err := os.Open(huge)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b := m.load(f)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d bytes taking the binary in; refused %d; cost %d; %d symbols (from .dynsym)", allocated, m.Refused(), m.Bytes(), len(b.syms))
	if b.err != nil || len(b.loads) == 0 {
		t.Fatalf("the binary's segments were not read: %v", b.err)
	}
	if m.Refused() != 1 || allocated > budget || m.Bytes() > budget {
		t.Errorf("refused %d tables, allocated %d bytes, cost %d: want the symbol table refused within %d bytes", m.Refused(), allocated, m.Bytes(), budget)
	}
}

// The same binary, undoctored, is read whole within the budget: its
// functions are found, and the cost is charged and given back when its
// file is closed. A second binary that does not fit beside the first
// closes the first once no process maps it.
func TestBudgetClosesIdleBinariesForRoom(t *testing.T) {
	bin := cProgram(t)
	maps := addrmap.New()
	m := New(maps, func(_ uint32, name string) (File, string, error) {
		f, err := os.Open(name)
		return f, name, err
	}, nil)
	defer m.Close()
	a := m.binary(1, bin)
	if a.err != nil || len(a.syms) == 0 || m.Bytes() == 0 || m.Refused() != 0 {
		t.Fatalf("%v, %d symbols, cost %d, refused %d", a.err, len(a.syms), m.Bytes(), m.Refused())
	}
	cost := m.Bytes()
	// A budget with room for reading one binary's table, and not beside
	// what another's costs.
	peak := symtabPeakBytes(a.ef, ".symtab", ".strtab")
	m.SetBudget(peak + cost/2)
	m.Forget(1) // a is idle now
	other := filepath.Join(t.TempDir(), "copy")
	data, _ := os.ReadFile(bin)
	if err := os.WriteFile(other, append(data, 0), 0o755); err != nil { // another inode
		t.Fatal(err)
	}
	b := m.binary(2, other)
	if len(b.syms) == 0 || m.OpenFiles() != 1 || m.Bytes() != cost || m.Refused() != 0 {
		t.Errorf("second binary: %d symbols, %d files open, cost %d (one binary's %d), refused %d", len(b.syms), m.OpenFiles(), m.Bytes(), cost, m.Refused())
	}
	m.CloseIdle()
	m.Forget(2)
	m.CloseIdle()
	if m.Bytes() != 0 || m.OpenFiles() != 0 {
		t.Errorf("all closed: cost %d, %d files", m.Bytes(), m.OpenFiles())
	}
}
