package main

import (
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/registry"
	"github.com/pmu-exporter/pmu_exporter/topdown"
)

// collectorList is every collector the exporter has, with its options bound
// to f: adding a collector adds a line here (and its package).
func collectorList(f *flags) *registry.Registry {
	r, err := registry.New(
		registry.Collector{Name: "counting", Required: true, Needs: []string{capability.SystemWide},
			Help: "Count the configured and default events on every CPU"},
		registry.Collector{Name: "topdown", Default: true,
			Help: "Compute Top-Down levels 1 and 2 where the CPU has a built-in tree (or --topdown.definitions gives one)",
			Options: func(cmd *kingpin.CmdClause) {
				cmd.Flag("topdown.uarch", "Top-Down trees to use instead of the detected ones, comma-separated, one per core type (hybrids: adl,grt): "+strings.Join(topdown.Names(), ", ")+"; none makes --topdown.definitions the whole tree.").StringVar(&f.tdUarch)
				cmd.Flag("topdown.definitions", "YAML metric file extending or overriding the Top-Down tree (the first, P-core, tree on hybrids; the whole tree where no built-in one applies).").StringVar(&f.tdDef)
			}},
		registry.Collector{Name: "cgroup", Default: true, Needs: []string{capability.CgroupEvents},
			Help: "Attribute the counted events and Top-Down to cgroups (pods, containers) with an eBPF program on cgroup switches",
			Options: func(cmd *kingpin.CmdClause) {
				cmd.Flag("cgroup.depth", "Ancestor levels below the root that also get the counts of their descendants (kubelet pods sit at level 3, containers at 4).").
					Default("5").IntVar(&f.cgroupDepth)
				cmd.Flag("cgroup.max-series", "Cgroups exported with series of their own; the smallest consumers beyond it are summed into cgroup=\"other\".").
					Default("500").IntVar(&f.cgroupSeries)
				cmd.Flag("cgroup.max-tracked", "Cgroups the kernel's attribution map holds at once; credits beyond it are dropped and counted in pmu_cgroup_attribution_errors_total{reason=\"map_full\"}.").
					Default("16384").IntVar(&f.cgroupTracked)
				cmd.Flag("cgroup.grace-period", "How long a removed cgroup keeps its series before they are dropped.").
					Default("5m").DurationVar(&f.cgroupGrace)
				cmd.Flag("cgroup.perf-mode", "Where the eBPF attribution cannot run (no CAP_BPF, no cgroup-switches): count this cgroup (path as in /proc/<pid>/cgroup; repeatable) with perf's cgroup mode instead, at one fd per event per CPU per cgroup.").
					StringsVar(&f.cgroupPerf)
			}},
		registry.Collector{Name: "sampling", Default: true,
			Help: "Sample memory accesses with the host's precise PMU (Intel PEBS mem-loads and mem-stores, AMD IBS op) and any --sampling.event: data sources, load latency, lost samples and shared cache lines",
			Options: func(cmd *kingpin.CmdClause) {
				cmd.Flag("sampling.sharing-window", "How long after a thread's latest sampled access to a cache line its bytes still make another thread's access to the line sharing (0: as long as the line is held, as perf c2c over a recording).").
					Default("1s").DurationVar(&f.sampling.sharingWindow)
				cmd.Flag("sampling.per-cgroup", "Record each sample's cgroup (PERF_SAMPLE_CGROUP, Linux 5.7) and export pmu_cgroup_* sampling series, bounded by --cgroup.max-series.").
					Default("true").BoolVar(&f.sampling.perCgroup)
				cmd.Flag("sampling.event", "Also sample this event (perf syntax; repeatable), e.g. page-faults: its samples are counted in pmu_sampling_samples_total.").StringsVar(&f.sampling.events)
				cmd.Flag("sampling.period", "Initial sampling period of every sampling event (events per sample); the governor raises it when samples cost too much, and never sets it lower.").
					Default("10007").Uint64Var(&f.sampling.period)
				cmd.Flag("sampling.ldlat", "Intel PEBS load latency threshold in core cycles: loads faster than it are not sampled.").Default("30").Uint64Var(&f.sampling.ldlat)
				cmd.Flag("sampling.cpu-budget", "CPU the exporter may spend on sampling, in CPUs (0.01: 1% of one CPU); periods rise beyond it, as they do beyond half of perf_event_max_sample_rate.").
					Default("0.01").Float64Var(&f.sampling.budget)
				cmd.Flag("sampling.ring-pages", "Data pages of each CPU's sampling ring buffer (a power of two).").Default("16").IntVar(&f.sampling.pages)
				cmd.Flag("sampling.max-lines", "Cache lines the shared-line table holds (/debug/cachelines); the coldest half is dropped when full.").
					Default("1024").IntVar(&f.sampling.maxLines)
			}},
	)
	if err != nil {
		panic(err) // a programming error in the list above, caught by every test
	}
	return r
}
