package eventspec

import "strings"

// Generic event numbers from include/uapi/linux/perf_event.h. They are ABI: the
// kernel maps them to each PMU's own encoding.

var hardwareEvents = map[string]uint64{
	"cycles": 0, "cpu-cycles": 0,
	"instructions":     1,
	"cache-references": 2,
	"cache-misses":     3,
	"branches":         4, "branch-instructions": 4,
	"branch-misses":           5,
	"bus-cycles":              6,
	"stalled-cycles-frontend": 7, "idle-cycles-frontend": 7,
	"stalled-cycles-backend": 8, "idle-cycles-backend": 8,
	"ref-cycles": 9,
}

var softwareEvents = map[string]uint64{
	"cpu-clock":   0,
	"task-clock":  1,
	"page-faults": 2, "faults": 2,
	"context-switches": 3, "cs": 3,
	"cpu-migrations": 4, "migrations": 4,
	"minor-faults":     5,
	"major-faults":     6,
	"alignment-faults": 7,
	"emulation-faults": 8,
	"dummy":            9,
	"bpf-output":       10,
	"cgroup-switches":  11,
}

// Cache events are PERF_TYPE_HW_CACHE with config = cache | op<<8 | result<<16.
var cacheIDs = map[string]uint64{
	"L1-dcache": 0, "L1-icache": 1, "LLC": 2, "dTLB": 3, "iTLB": 4, "branch": 5, "node": 6,
}

// cacheOps maps the suffix after the cache name to (op, result).
var cacheOps = map[string][2]uint64{
	"loads": {0, 0}, "load-misses": {0, 1},
	"stores": {1, 0}, "store-misses": {1, 1},
	"prefetches": {2, 0}, "prefetch-misses": {2, 1},
}

// toolEvents are perf's own events, which perf counts itself (perf stat's
// duration_time, user_time, system_time).
var toolEvents = map[string]bool{"duration_time": true, "user_time": true, "system_time": true}

// CountsWithoutPMU says whether name, as perf prints it (modifiers such
// as :u aside), is an event no PMU counts: a software or a tool event. A
// recording of only these was made where no PMU counts.
func CountsWithoutPMU(name string) bool {
	base, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(name)), ":")
	_, sw := softwareEvents[base]
	return sw || toolEvents[base]
}
