package gatecheck

import "regexp"

// Rules are what this project's tests do that needs a gated feature. A
// new way of reaching one (a flag, a probe, a live sysfs read) belongs
// here, with the gate's feature it needs.
func Rules() []Rule {
	re := regexp.MustCompile
	const mod = `github\.com/pmu-exporter/pmu_exporter/`
	return []Rule{
		{Feature: "watchpoints", Why: "starts the comm collector's watchpoints (ComDetective's traps or ReuseTracker), which refuses to run where no watchpoint traps",
			All: []*regexp.Regexp{re(`^` + Lit + `--collector\.comm\.(watchpoints|reuse)(=true)?$`)}},
		// Opening the engine needs breakpoint events that open, which every
		// guest of the pool has; what traps needs the feature.
		{Feature: "watchpoints", Why: "measures what a trap costs, which needs a trap",
			All: []*regexp.Regexp{re(`^` + Call + mod + `kernel/watch\.TrapCost$`)}},
		{Feature: "watchpoints", Why: "runs the watched-writes kernel or the breakpoint probe, whose counts are the debug registers'",
			All: []*regexp.Regexp{re(`^` + Call + mod + `kernel/(selftest\.WatchedWrites|perf\.ProbeBreakpoint)$`)}},
		{Feature: "cache_topology", Why: "reads this host's caches from sysfs, which some guests do not describe",
			All: []*regexp.Regexp{re(`^` + Call + mod + `host\.(CacheSizes|NewLLCDomains|ReadCacheFacts)\("?/sys/?$`)}},
		{Feature: "hardware_counting", Why: "opens a hardware event on this host's PMU",
			All: []*regexp.Regexp{re(`^` + Ref + `golang\.org/x/sys/unix\.PERF_TYPE_HARDWARE$`)}, Packages: re(`^(kernel|cmd)/`), Own: true},
		{Feature: "hardware_counting", Why: "starts the exporter with a hardware event or Top-Down counted live",
			All: []*regexp.Regexp{re(`^` + Lit + `--collector\.comm\.reuse-clock=(instructions|cycles|branches)`)}},
		{Feature: "cpu_hotplug", Why: "takes a CPU offline through sysfs",
			All: []*regexp.Regexp{re(`^` + Lit + `.*/sys/devices/system/cpu/cpu(%d|[0-9]+)/online$`)}, Packages: re(`^(kernel|cmd|collector|host|dashboards)/`)},
	}
}
