// Package host reads what the machine says about itself that decides what can be
// measured: CPU vendor, family, model and stepping and the hypervisor flag (from
// /proc/cpuinfo through prometheus/procfs), the kernel's perf settings
// (perf_event_paranoid, perf_event_max_sample_rate, nmi_watchdog), the process's
// effective capabilities, the cgroup hierarchy, and the online CPUs. Paths are
// rooted at --path.procfs and --path.sysfs so a container with host mounts, and
// tests with fixture trees, read the right files.
package host
