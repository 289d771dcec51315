package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// cacheIndex is one of a CPU's caches in sysfs (cpuN/cache/indexM).
type cacheIndex struct {
	level         int
	size          string // "32K"
	sharedCPUList string
}

// cacheIndexes reads cpu's data and unified caches (instruction caches
// left out); nil where sysfs does not describe them.
func cacheIndexes(sysfs string, cpu int) ([]cacheIndex, error) {
	dir := filepath.Join(sysfs, "devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), "cache")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []cacheIndex
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name(), f))
			return strings.TrimSpace(string(b))
		}
		level, err := strconv.Atoi(read("level"))
		if err != nil || read("type") == "Instruction" {
			continue
		}
		out = append(out, cacheIndex{level: level, size: read("size"), sharedCPUList: read("shared_cpu_list")})
	}
	return out, nil
}

// LLCDomains names, for each CPU in cpus, the last-level cache it shares:
// the CPU list of the highest-level data or unified cache in
// <sysfs>/devices/system/cpu/cpuN/cache (e.g. "0-15"), so that
// communication between CPUs can be folded to domains whose count grows
// with sockets and dies, not CPUs. A CPU whose caches sysfs does not
// describe is its own domain.
func LLCDomains(sysfs string, cpus []int) (map[int]string, error) {
	out := make(map[int]string, len(cpus))
	for _, cpu := range cpus {
		caches, _ := cacheIndexes(sysfs, cpu)
		best, shared := -1, ""
		for _, c := range caches {
			if c.level <= best {
				continue
			}
			if _, err := cpuset.Parse(c.sharedCPUList); err != nil {
				return nil, fmt.Errorf("cpu%d: level %d cache shared_cpu_list: %w", cpu, c.level, err)
			}
			best, shared = c.level, c.sharedCPUList
		}
		if shared == "" {
			shared = strconv.Itoa(cpu)
		}
		out[cpu] = shared
	}
	return out, nil
}

// Caches are the data cache sizes one CPU sees, in bytes (0: not
// described): its level 1 data cache, level 2, and its last level.
type Caches struct {
	L1d, L2, LLC uint64
	LLCLevel     int
}

// Unsized names the caches (L1d, L2, LLC) whose size is not known.
func (c Caches) Unsized() []string {
	var out []string
	for _, s := range []struct {
		name string
		size uint64
	}{{"L1d", c.L1d}, {"L2", c.L2}, {"LLC", c.LLC}} {
		if s.size == 0 {
			out = append(out, s.name)
		}
	}
	return out
}

// CacheSizes reads cpu's data and unified caches from
// <sysfs>/devices/system/cpu/cpuN/cache/index*/{level,type,size}. A cache
// without a size file is described but not sized (0): arm64 kernels learn
// levels and types from the CPU (CLIDR_EL1) but sizes only from the
// firmware (devicetree or ACPI PPTT), and hide the file where it gives
// none, as on QEMU's virt machine.
func CacheSizes(sysfs string, cpu int) (Caches, error) {
	var c Caches
	caches, err := cacheIndexes(sysfs, cpu)
	if err != nil {
		return c, fmt.Errorf("cache sizes: %w", err)
	}
	for _, ci := range caches {
		var size uint64
		if ci.size != "" {
			if size, err = parseSize(ci.size); err != nil {
				return c, fmt.Errorf("cpu%d: level %d cache size: %w", cpu, ci.level, err)
			}
		}
		switch ci.level {
		case 1:
			c.L1d = size
		case 2:
			c.L2 = size
		}
		if ci.level > c.LLCLevel {
			c.LLCLevel, c.LLC = ci.level, size
		}
	}
	return c, nil
}

// parseSize reads sysfs's cache size: a number of bytes with a K, M or G
// suffix ("32K", "1024K").
func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return n * mult, nil
}
