package host

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// A two-socket layout in a fake sysfs: each socket's L3 is its domain; the
// instruction cache and lower levels do not count; a CPU without cache
// entries is its own.
func TestLLCDomains(t *testing.T) {
	root := t.TempDir()
	cache := func(cpu, index int, level, typ, shared string) {
		writeCache(t, root, cpu, index, map[string]string{"level": level, "type": typ, "shared_cpu_list": shared})
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

// writeCache writes cpuN/cache/indexM's files (name → content) under a
// fake sysfs root.
func writeCache(t *testing.T, root string, cpu, index int, files map[string]string) {
	t.Helper()
	d := filepath.Join(root, "devices/system/cpu", "cpu"+itoa(cpu), "cache", "index"+itoa(index))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An arm64 kernel without firmware cache sizes (QEMU's virt machine:
// levels and types from CLIDR_EL1, no devicetree cache nodes) lists the
// caches without size files: they are described but not sized, and the
// sized ones keep their sizes. A size sysfs cannot mean is an error naming
// the CPU and level.
func TestCacheSizesWithoutFirmwareSizes(t *testing.T) {
	root := t.TempDir()
	writeCache(t, root, 0, 0, map[string]string{"level": "1", "type": "Data"})
	writeCache(t, root, 0, 1, map[string]string{"level": "1", "type": "Instruction"})
	writeCache(t, root, 0, 2, map[string]string{"level": "2", "type": "Unified", "size": "1024K"})
	writeCache(t, root, 0, 3, map[string]string{"level": "3", "type": "Unified"})
	c, err := CacheSizes(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Caches{L2: 1 << 20, LLCLevel: 3}); c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if got := strings.Join(c.Unsized(), ","); got != "L1d,LLC" {
		t.Errorf("unsized %q, want L1d,LLC", got)
	}
	writeCache(t, root, 0, 0, map[string]string{"size": "32 kB"})
	if _, err := CacheSizes(root, 0); err == nil || !strings.Contains(err.Error(), "cpu0: level 1 cache size") {
		t.Errorf("a size of \"32 kB\": %v", err)
	}
}

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
