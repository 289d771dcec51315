package host

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pmu-exporter/pmu_exporter/cpuset"
)

// OnlineCPUs reads <sysfs>/devices/system/cpu/online.
func OnlineCPUs(sysfs string) ([]int, error) {
	p := filepath.Join(sysfs, "devices", "system", "cpu", "online")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading online CPUs: %w", err)
	}
	cpus, err := cpuset.Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return cpus, nil
}
