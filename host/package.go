package host

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// PackageOf names each CPU's package, its topology's physical_package_id
// under sysfs ("unknown" where the file cannot be read), read once per CPU:
// the label of the per-socket platform counters.
func PackageOf(sysfs string) func(cpu int) string {
	var mu sync.Mutex
	known := map[int]string{}
	return func(cpu int) string {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := known[cpu]; ok {
			return p
		}
		p := "unknown"
		if b, err := os.ReadFile(filepath.Join(sysfs, "devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), "topology", "physical_package_id")); err == nil {
			p = strings.TrimSpace(string(b))
		}
		known[cpu] = p
		return p
	}
}
