package host

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// On the live /proc the answer is one of the CPUs asked about; a list of
// one is answered with that CPU; without /proc, the last CPU and the
// error.
func TestIdlestCPU(t *testing.T) {
	online := []int{0, 1}
	_, err := os.Stat("/proc/stat")
	testenv.Require(t, err == nil, "no /proc/stat")
	c, err := IdlestCPU("/proc", online, 20*time.Millisecond)
	if err != nil || !slices.Contains(online, c) {
		t.Errorf("IdlestCPU = %d, %v", c, err)
	}
	if c, _ := IdlestCPU("/proc", []int{1}, time.Millisecond); c != 1 {
		t.Errorf("one CPU: %d", c)
	}
	if c, err := IdlestCPU(filepath.Join(t.TempDir(), "none"), []int{0, 3}, time.Millisecond); err == nil || c != 3 {
		t.Errorf("no /proc: %d, %v", c, err)
	}
}
