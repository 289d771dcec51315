package host

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// This machine's L1d and L2 agree with glibc's (getconf, from CPUID), and
// the last level is the largest; on a host whose sysfs and CPUID describe
// no caches (internal/hostgate) it is skipped with their proof.
func TestCacheSizesAgainstGetconf(t *testing.T) {
	testenv.RequireFeature(t, hostgate.CacheTopology)
	c, err := CacheSizes("/sys", 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := func(name string) uint64 {
		out, err := exec.Command("getconf", name).Output()
		if err != nil {
			testenv.Require(t, false, "getconf: "+err.Error())
		}
		v, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		return v
	}
	if l1 := conf("LEVEL1_DCACHE_SIZE"); l1 != 0 && c.L1d != l1 {
		t.Errorf("L1d %d, getconf %d", c.L1d, l1)
	}
	if l2 := conf("LEVEL2_CACHE_SIZE"); l2 != 0 && c.L2 != l2 {
		t.Errorf("L2 %d, getconf %d", c.L2, l2)
	}
	if c.LLC < c.L2 || c.LLC < c.L1d || c.LLCLevel < 2 {
		t.Errorf("%+v", c)
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]uint64{"32K": 32 << 10, "1024K": 1 << 20, "2M": 2 << 20, "512": 512} {
		if got, err := ParseCacheSize(s); err != nil || got != want {
			t.Errorf("ParseCacheSize(%q) = %d, %v", s, got, err)
		}
	}
	if _, err := ParseCacheSize("lots"); err == nil {
		t.Error("ParseCacheSize(lots)")
	}
}
