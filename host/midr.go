package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MIDRs reads each CPU's MIDR_EL1 from <sysfs>/devices/system/cpu/cpuN/
// regs/identification/midr_el1 (arm64; none elsewhere): which core it is,
// and so how its Arm SPE data sources are encoded. CPUs offline keep
// theirs there.
func MIDRs(sysfs string) (map[int]uint64, error) {
	paths, err := filepath.Glob(filepath.Join(sysfs, "devices", "system", "cpu", "cpu[0-9]*", "regs", "identification", "midr_el1"))
	if err != nil {
		return nil, err
	}
	out := map[int]uint64{}
	for _, p := range paths {
		dir := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(p))))
		cpu, err := strconv.Atoi(strings.TrimPrefix(dir, "cpu"))
		if err != nil {
			continue // cpufreq, cpuidle and the like
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading a MIDR: %w", err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a MIDR_EL1 value", p, strings.TrimSpace(string(b)))
		}
		out[cpu] = v
	}
	return out, nil
}
