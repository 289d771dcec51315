package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cacheIndex is one of a CPU's caches in sysfs (cpuN/cache/indexM).
type cacheIndex struct {
	level         int
	size          string // "32K"
	sharedCPUList string
	id            string // "" where sysfs has no id file
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
		out = append(out, cacheIndex{level: level, size: read("size"), sharedCPUList: read("shared_cpu_list"), id: read("id")})
	}
	return out, nil
}

// LLCDomains names the last-level cache each CPU shares, so that
// communication between CPUs can be folded to domains whose count grows
// with sockets and dies, not CPUs. A domain is named by its cache's level
// and sysfs id ("L3#0"), stable across hotplug: sysfs removes an offline
// CPU's cache/ entries and lists it out of its siblings' shared_cpu_list,
// so a CPU list read while a sibling is offline would name the same cache
// differently. Where sysfs gives no id, the name is the cache's CPU list
// ("0-15"); a CPU whose cache/ holds no data or unified cache is its own
// domain (its number); a CPU whose sysfs has no cache/ at all, online, is
// placed by its package ("package#0"). CPUs are read at first ask, so a
// CPU that comes online later is placed then.
type LLCDomains struct {
	sysfs string
	// retry is how long a CPU without cache/ (offline, or not yet
	// described) waits before it is read again.
	retry time.Duration
	now   func() time.Time

	mu     sync.Mutex
	names  map[int]string
	missed map[int]time.Time
}

// PackageDomainPrefix begins the name of a domain that is a CPU package
// ("package#0"), not a cache: sysfs describes no caches of its CPUs.
const PackageDomainPrefix = "package#"

// NewLLCDomains reads the domains under <sysfs>/devices/system/cpu.
func NewLLCDomains(sysfs string) *LLCDomains {
	return &LLCDomains{sysfs: sysfs, retry: time.Second, now: time.Now, names: map[int]string{}, missed: map[int]time.Time{}}
}

// Of names cpu's last-level cache domain; false where sysfs does not list
// cpu's caches now (it is offline), asked again no sooner than a second
// later.
func (l *LLCDomains) Of(cpu int) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name, ok := l.names[cpu]; ok {
		return name, true
	}
	if at, ok := l.missed[cpu]; ok && l.now().Sub(at) < l.retry {
		return "", false
	}
	caches, err := cacheIndexes(l.sysfs, cpu)
	if err != nil {
		// An online CPU (its topology/ is there; the kernel removes it
		// with cache/ when the CPU goes offline) whose caches sysfs does
		// not describe, as on a guest whose CPUID lacks the cache
		// leaves: its package is the domain, since which CPUs share a
		// cache is not known.
		if pkg, perr := os.ReadFile(filepath.Join(l.sysfs, "devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), "topology", "physical_package_id")); perr == nil {
			name := PackageDomainPrefix + strings.TrimSpace(string(pkg))
			delete(l.missed, cpu)
			l.names[cpu] = name
			return name, true
		}
		l.missed[cpu] = l.now()
		return "", false
	}
	delete(l.missed, cpu)
	best, name := -1, strconv.Itoa(cpu)
	for _, c := range caches {
		if c.level <= best {
			continue
		}
		switch {
		case c.id != "":
			best, name = c.level, "L"+strconv.Itoa(c.level)+"#"+c.id
		case c.sharedCPUList != "":
			best, name = c.level, c.sharedCPUList
		}
	}
	l.names[cpu] = name
	return name, true
}

// Caches are the data cache sizes one CPU sees, in bytes (0: not
// described): its level 1 data cache, level 2, and its last level.
type Caches struct {
	L1d      uint64 `json:"l1d_bytes"`
	L2       uint64 `json:"l2_bytes"`
	LLC      uint64 `json:"llc_bytes"`
	LLCLevel int    `json:"llc_level"`
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
			if size, err = ParseCacheSize(ci.size); err != nil {
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

// ParseCacheSize reads sysfs's cache size (and perf.data's HEADER_CACHE,
// which copies it): a number of bytes with a K, M or G suffix ("32K",
// "1024K").
func ParseCacheSize(s string) (uint64, error) {
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
