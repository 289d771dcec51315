package host

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// A two-socket layout in a fake sysfs: each socket's L3 is its domain,
// named by its id; the instruction cache and lower levels do not count.
// Where the L3 has no id, its CPU list names it; a CPU whose cache/ holds
// no data cache is its own domain, and one without cache/ (offline) is
// not placed until it has one, asked again after the retry.
func TestLLCDomains(t *testing.T) {
	root := t.TempDir()
	cache := func(cpu, index int, level, typ, shared, id string) {
		files := map[string]string{"level": level, "type": typ, "shared_cpu_list": shared}
		if id != "" {
			files["id"] = id
		}
		writeCache(t, root, cpu, index, files)
	}
	for cpu := range 4 {
		socket, id := "0-1", "0"
		if cpu >= 2 {
			socket, id = "2-3", "1"
		}
		cache(cpu, 0, "1", "Data", itoa(cpu), itoa(cpu))
		cache(cpu, 1, "1", "Instruction", itoa(cpu), itoa(cpu))
		cache(cpu, 2, "2", "Unified", itoa(cpu), itoa(cpu))
		cache(cpu, 3, "3", "Unified", socket, id)
		if cpu == 1 {
			// CPU 0 offline: sysfs lists it out of its siblings'.
			cache(cpu, 3, "3", "Unified", "1", id)
		}
	}
	cache(4, 0, "1", "Data", "4", "")
	cache(4, 1, "2", "Unified", "4-5", "")
	cache(5, 0, "1", "Instruction", "5", "")
	cache(6, 3, "4", "Unified", "6", "")
	if err := os.RemoveAll(filepath.Join(root, "devices/system/cpu/cpu6/cache")); err != nil {
		t.Fatal(err)
	}
	d := NewLLCDomains(root)
	now := time.Unix(0, 0)
	d.now = func() time.Time { return now }
	want := map[int]string{0: "L3#0", 1: "L3#0", 2: "L3#1", 3: "L3#1", 4: "4-5", 5: "5"}
	for cpu, name := range want {
		if got, ok := d.Of(cpu); got != name || !ok {
			t.Errorf("cpu %d: domain %q (%v), want %q", cpu, got, ok, name)
		}
	}
	if got, ok := d.Of(6); ok {
		t.Errorf("cpu 6 without cache/: domain %q", got)
	}
	cache(6, 3, "3", "Unified", "6-7", "2") // it comes online
	now = now.Add(d.retry / 2)
	if got, ok := d.Of(6); ok {
		t.Errorf("cpu 6 asked again before the retry: domain %q", got)
	}
	now = now.Add(d.retry / 2)
	if got, ok := d.Of(6); got != "L3#2" || !ok {
		t.Errorf("cpu 6 online: domain %q (%v), want L3#2", got, ok)
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

// This machine's own sysfs: every online CPU has a domain, and two CPUs
// have the same one exactly where each is in the other's last-level
// shared_cpu_list.
func TestLLCDomainsHere(t *testing.T) {
	testenv.RequireFeature(t, hostgate.CacheTopology)
	cpus, err := OnlineCPUs("/sys")
	if err != nil {
		t.Fatal(err)
	}
	d := NewLLCDomains("/sys")
	names := map[int]string{}
	for _, cpu := range cpus {
		name, ok := d.Of(cpu)
		if !ok {
			t.Fatalf("cpu %d (online) has no domain", cpu)
		}
		names[cpu] = name
	}
	shares := func(a, b int) bool {
		caches, _ := cacheIndexes("/sys", a)
		best, list := -1, strconv.Itoa(a)
		for _, c := range caches {
			if c.level > best {
				best, list = c.level, c.sharedCPUList
			}
		}
		set, err := cpuset.Parse(list)
		return err == nil && cpuset.Contains(set, b)
	}
	for _, a := range cpus {
		for _, b := range cpus {
			if same := names[a] == names[b]; same != (shares(a, b) && shares(b, a)) {
				t.Errorf("cpus %d and %d: domains %q and %q, but sysfs says sharing is %v", a, b, names[a], names[b], !same)
			}
		}
	}
}

// The kernel lists an offline CPU out of its siblings' shared_cpu_list; a
// CPU's domain read while a sibling is offline is the same as read with
// both online, and the sibling is placed once it is back.
func TestLLCDomainsUnderHotplug(t *testing.T) {
	testenv.RequireFeature(t, hostgate.CacheTopology)
	cpu, ctl := testenv.HotplugCPU(t)
	all := NewLLCDomains("/sys")
	online := testenv.OnlineCPUs(t)
	for _, c := range online {
		if _, ok := all.Of(c); !ok {
			t.Fatalf("cpu %d (online) has no domain", c)
		}
	}
	if err := os.WriteFile(ctl, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	without := NewLLCDomains("/sys")
	without.retry = 0
	for _, c := range online {
		got, ok := without.Of(c)
		want, _ := all.Of(c)
		switch {
		case c == cpu && ok:
			t.Errorf("cpu %d offline: domain %q", c, got)
		case c != cpu && got != want:
			t.Errorf("cpu %d with cpu %d offline: domain %q, with it online %q", c, cpu, got, want)
		}
	}
	if err := os.WriteFile(ctl, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _ := all.Of(cpu)
	if got, ok := without.Of(cpu); got != want || !ok {
		t.Errorf("cpu %d back online: domain %q (%v), want %q", cpu, got, ok, want)
	}
}

// A guest whose sysfs describes no caches at all (the AMD guest
// without TOPOEXT): each online CPU (its topology/ there) is placed by its
// package, said in the name; a CPU without topology/ either (offline) is
// not placed.
func TestLLCDomainsByPackageWithoutCaches(t *testing.T) {
	root := t.TempDir()
	for cpu, pkg := range map[int]string{0: "0", 1: "0", 2: "1"} {
		d := filepath.Join(root, "devices/system/cpu", "cpu"+itoa(cpu), "topology")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "physical_package_id"), []byte(pkg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "devices/system/cpu/cpu3"), 0o755) // offline
	d := NewLLCDomains(root)
	for cpu, want := range map[int]string{0: "package#0", 1: "package#0", 2: "package#1"} {
		if got, ok := d.Of(cpu); got != want || !ok {
			t.Errorf("cpu %d: domain %q (%v), want %q", cpu, got, ok, want)
		}
	}
	if got, ok := d.Of(3); ok {
		t.Errorf("cpu 3 offline: domain %q", got)
	}
}
