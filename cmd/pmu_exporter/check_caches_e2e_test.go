package main

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// check says what it knows of the caches and where it came from: sysfs
// where the host gate finds cache topology (sysfs and CPUID's cache leaves
// agree), CPUID's legacy leaves, without sharing, where it does not; and
// the L1d size is glibc's (getconf, which reads CPUID itself) wherever
// getconf knows one.
func TestCheckCaches(t *testing.T) {
	out, err := exec.Command(binary, "check", "--format=json").Output()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	var r struct {
		Caches struct {
			CPU   int `json:"cpu"`
			Facts *struct {
				L1d     uint64 `json:"l1d_bytes"`
				Source  string `json:"source"`
				Sharing bool   `json:"sharing"`
			} `json:"facts"`
			Error string `json:"error"`
		} `json:"caches"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	c := r.Caches
	topology := testenv.HasFeature(t, hostgate.CacheTopology)
	switch {
	case topology && (c.Facts == nil || c.Facts.Source != "sysfs" || !c.Facts.Sharing):
		t.Fatalf("sysfs describes the caches, check says %+v (facts %+v)", c, c.Facts)
	case !topology && c.Facts != nil && c.Facts.Source == "sysfs":
		t.Fatalf("no cache topology here, check says %+v", c.Facts)
	case c.Facts == nil:
		t.Logf("check knows no caches here: %s", c.Error)
		return
	}
	if g, err := exec.Command("getconf", "LEVEL1_DCACHE_SIZE").Output(); err == nil {
		if l1, _ := strconv.ParseUint(strings.TrimSpace(string(g)), 10, 64); l1 != 0 && l1 != c.Facts.L1d {
			t.Errorf("check's L1d %d (from %s), getconf %d", c.Facts.L1d, c.Facts.Source, l1)
		}
	}
	text, err := exec.Command(binary, "check").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "Caches:     CPU "+strconv.Itoa(c.CPU)+": L1d ") || !strings.Contains(string(text), "from "+c.Facts.Source) {
		t.Errorf("check's text says nothing of the caches' source:\n%s", text)
	}
}
