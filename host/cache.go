package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// LLCDomains names, for each CPU in cpus, the last-level cache it shares:
// the CPU list of the highest-level data or unified cache in
// <sysfs>/devices/system/cpu/cpuN/cache (e.g. "0-15"), so that
// communication between CPUs can be folded to domains whose count grows
// with sockets and dies, not CPUs. A CPU whose caches sysfs does not
// describe is its own domain.
func LLCDomains(sysfs string, cpus []int) (map[int]string, error) {
	out := make(map[int]string, len(cpus))
	for _, cpu := range cpus {
		dir := filepath.Join(sysfs, "devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), "cache")
		entries, err := os.ReadDir(dir)
		if err != nil {
			out[cpu] = strconv.Itoa(cpu)
			continue
		}
		best, shared := -1, ""
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "index") {
				continue
			}
			read := func(f string) string {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name(), f))
				return strings.TrimSpace(string(b))
			}
			if read("type") == "Instruction" {
				continue
			}
			level, err := strconv.Atoi(read("level"))
			if err != nil || level <= best {
				continue
			}
			list := read("shared_cpu_list")
			if _, err := cpuset.Parse(list); err != nil {
				return nil, fmt.Errorf("%s/%s/shared_cpu_list: %w", dir, e.Name(), err)
			}
			best, shared = level, list
		}
		if shared == "" {
			shared = strconv.Itoa(cpu)
		}
		out[cpu] = shared
	}
	return out, nil
}
