package host

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// A two-socket layout in a fake sysfs: each socket's L3 is its domain; the
// instruction cache and lower levels do not count; a CPU without cache
// entries is its own.
func TestLLCDomains(t *testing.T) {
	root := t.TempDir()
	cache := func(cpu, index int, level, typ, shared string) {
		d := filepath.Join(root, "devices/system/cpu", "cpu"+itoa(cpu), "cache", "index"+itoa(index))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "level"), []byte(level+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "type"), []byte(typ+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "shared_cpu_list"), []byte(shared+"\n"), 0o644)
	}
	for cpu := range 4 {
		socket := "0-1"
		if cpu >= 2 {
			socket = "2-3"
		}
		cache(cpu, 0, "1", "Data", itoa(cpu))
		cache(cpu, 1, "1", "Instruction", itoa(cpu))
		cache(cpu, 2, "2", "Unified", itoa(cpu))
		cache(cpu, 3, "3", "Unified", socket)
	}
	got, err := LLCDomains(root, []int{0, 1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3", 4: "4"}
	for cpu, d := range want {
		if got[cpu] != d {
			t.Errorf("cpu %d: domain %q, want %q", cpu, got[cpu], d)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// This machine's own sysfs: every online CPU has a domain, and CPUs that
// share one list it identically.
func TestLLCDomainsHere(t *testing.T) {
	cpus, err := OnlineCPUs("/sys")
	if err != nil {
		t.Fatal(err)
	}
	got, err := LLCDomains("/sys", cpus)
	if err != nil || len(got) != len(cpus) {
		t.Fatalf("%v %v", got, err)
	}
	for _, cpu := range cpus {
		d, err := cpuset.Parse(got[cpu])
		if err != nil || !cpuset.Contains(d, cpu) {
			t.Errorf("cpu %d: domain %q does not hold it (%v)", cpu, got[cpu], err)
		}
	}
}
