package collector

import (
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/internal/flaglist"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
)

// collectorList is every collector the exporter has, with its options bound
// to f and its factories (live in pipeline.go, replay in replay.go), in the
// order they are set up: adding a collector adds an entry here (and its
// package).
func collectorList(f *Options) *registry.Registry[*build] {
	r, err := registry.New(
		registry.Collector[*build]{Name: "counting", Required: true, Needs: []string{capability.SystemWide},
			Live: liveCounting, Replay: replayCounting,
			Help: "Count the configured and default events on every CPU",
			Options: func(o registry.Options) {
				o.Flag("per-cpu", "collector.per-cpu", "Add a cpu label to event and group series.",
					func(fc *kingpin.FlagClause) { fc.BoolVar(&f.perCPU) })
				o.Flag("interval", "collector.interval", "How often every group is read (per-cgroup attribution and Top-Down follow each read).",
					func(fc *kingpin.FlagClause) {
						flagrange.Duration(fc, &f.interval, "1s", 10*time.Millisecond, time.Hour)
					})
				o.Flag("info-events", "", "Also count the inputs of the Info metrics the default groups lack, where the host counts hardware events: loads, stores and their L1 data cache misses, last-level cache loads and misses (perf's generic cache events, each group alone), and the Top-Down tree's Info events (Intel: loads that missed L1, L2 and L3, MEM_LOAD_RETIRED.*_MISS; AMD Zen 4: L2 demand misses); the recording rules make MPKI at each level and CPI of them. Off by default: on a PMU with few counters they add multiplexing.",
					func(fc *kingpin.FlagClause) { fc.BoolVar(&f.infoEvents) })
				o.Flag("hotplug-uevents", "", "Follow CPU hotplug as the kernel announces it (uevents on a netlink socket): a CPU that comes online is counted and sampled from milliseconds after, not from the next read; off, hotplug is followed at each read only.",
					func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.hotplugUevents) })
			}},
		registry.Collector[*build]{Name: "topdown", Default: true, Live: liveTopdownCollector, Replay: replayTopdown,
			Help: "Compute Top-Down (levels 1 and 2 by default; --collector.topdown.level for more) where the CPU has a built-in tree (or --collector.topdown.definitions gives one)",
			Options: func(o registry.Options) {
				o.Flag("uarch", "topdown.uarch", "Top-Down trees to use instead of the detected ones, comma-separated, one per core type (hybrids: adl,grt): "+strings.Join(topdown.Names(), ", ")+"; none makes --collector.topdown.definitions the whole tree.",
					func(fc *kingpin.FlagClause) { fc.StringVar(&f.tree.uarch) })
				o.Flag("definitions", "topdown.definitions", "YAML metric file extending or overriding the Top-Down tree (the first, P-core, tree on hybrids; the whole tree where no built-in one applies).", func(fc *kingpin.FlagClause) { fc.StringVar(&f.tree.definitions) })
				o.Flag("level", "", "The deepest Top-Down level counted and exported (1 to 6; 0: every level the tree has). Levels beyond 2 count more events, in more groups that the PMU multiplexes (pmu_group_running_seconds_total shows how much): toplev's -l. "+treeLevelsHelp+".", func(fc *kingpin.FlagClause) {
					flagrange.Int(fc, &f.tree.level, "2", 0, 6)
				})
				o.Flag("nodes", "", "Below level 1, only these nodes' subtrees and their ancestors (comma-separated or repeated; as toplev's --nodes): e.g. memory_bound with --collector.topdown.level=3 counts the memory nodes' events alone.", func(fc *kingpin.FlagClause) {
					flaglist.Var(fc, &f.tree.nodes)
				})
				o.Flag("cgroup-level", "", "The deepest Top-Down level attributed to each cgroup (at most --collector.topdown.level): each level adds series per cgroup, and its events are read at every context switch between cgroups.", func(fc *kingpin.FlagClause) {
					flagrange.Int(fc, &f.tree.cgroupLevel, "2", 0, 6)
				})
			}},
		registry.Collector[*build]{Name: "cgroup", Default: true, Needs: []string{capability.CgroupEvents},
			Live: liveCgroup, Replay: replayCgroups,
			Help: "Attribute the counted events and Top-Down to cgroups (pods, containers) with an eBPF program on cgroup switches",
			Options: func(o registry.Options) {
				o.Flag("depth", "cgroup.depth", "Ancestor levels below the root that also get the counts of their descendants (kubelet pods sit at level 3, containers at 4).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.cgroups.depth, "5", 0, 64) })
				o.Flag("events", "cgroup.events", "Counted events to attribute to cgroups besides Top-Down's inputs (comma-separated or repeated; all: every counted event). Each one is a counter read at every context switch between cgroups.", func(fc *kingpin.FlagClause) {
					flaglist.Var(fc.Default(strings.Join(DefaultCgroupEvents, ",")), &f.cgroups.events)
				})
				o.Flag("max-series", "cgroup.max-series", "Cgroups exported with series of their own; the smallest consumers beyond it are summed into cgroup=\"other\".", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.cgroups.maxSeries, "500", 1, 1_000_000) })
				o.Flag("max-tracked", "cgroup.max-tracked", "Cgroups the kernel's attribution map holds at once; credits beyond it are dropped and counted in pmu_cgroup_attribution_errors_total{reason=\"map_full\"}.", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.cgroups.maxTracked, "16384", 1, 1<<22) })
				o.Flag("grace-period", "cgroup.grace-period", "How long a removed cgroup keeps its series before they are dropped.", func(fc *kingpin.FlagClause) { flagrange.Duration(fc, &f.cgroups.grace, "5m", 0, 24*time.Hour) })
				o.Flag("perf-mode", "cgroup.perf-mode", "Where the eBPF attribution cannot run (no CAP_BPF, no cgroup-switches): count this cgroup (path as in /proc/<pid>/cgroup; repeatable) with perf's cgroup mode instead, at one fd per event per CPU per cgroup.", func(fc *kingpin.FlagClause) { fc.StringsVar(&f.cgroups.perfMode) })
			}},
		registry.Collector[*build]{Name: "sampling", Default: true, Live: liveSampling, Replay: replaySampling,
			Help: "Sample memory accesses with the host's precise PMU (Intel PEBS mem-loads and mem-stores, AMD IBS op, Arm SPE) and any --collector.sampling.event: data sources, load latency, lost samples and shared cache lines",
			Options: func(o registry.Options) {
				o.Flag("sharing-window", "sampling.sharing-window", "How long after a thread's latest sampled access to a cache line its bytes still make another thread's access to the line sharing (0: as long as the line is held, as perf c2c over a recording).", func(fc *kingpin.FlagClause) { flagrange.Duration(fc, &f.sampling.sharingWindow, "1s", 0, time.Hour) })
				o.Flag("per-cgroup", "sampling.per-cgroup", "Record each sample's cgroup (PERF_SAMPLE_CGROUP, Linux 5.7) and export pmu_cgroup_* sampling series, bounded by --collector.cgroup.max-series.", func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.sampling.perCgroup) })
				o.Flag("event", "sampling.event", "Also sample this event (perf syntax; repeatable), e.g. page-faults: its samples are counted in pmu_sampling_samples_total.", func(fc *kingpin.FlagClause) { fc.StringsVar(&f.sampling.events) })
				o.Flag("period", "sampling.period", "Initial sampling period of every sampling event (events per sample); the governor raises it when samples cost too much, and never sets it lower.", func(fc *kingpin.FlagClause) { flagrange.Uint64(fc, &f.sampling.period, "10007", 1, 1<<40) })
				o.Flag("ldlat", "sampling.ldlat", "Intel PEBS load latency threshold in core cycles: loads faster than it are not sampled.", func(fc *kingpin.FlagClause) { flagrange.Uint64(fc, &f.sampling.ldlat, "30", 1, 65535) })
				o.Flag("cpu-budget", "sampling.cpu-budget", "CPU the exporter may spend on sampling, in CPUs (0.01: 1% of one CPU); periods rise beyond it, as they do beyond half of perf_event_max_sample_rate.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.sampling.budget, "0.01", 0.0001, 1024) })
				o.Flag("ring-pages", "sampling.ring-pages", "Data pages of each CPU's sampling ring buffer (a power of two).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.sampling.pages, "16", 1, 1<<16) })
				o.Flag("spe", "sampling.spe", "Sample with Arm SPE where the host has it: the sampling collector, or the comm collector where the sampling collector is off. SPE admits one event per CPU, system-wide: while the exporter holds it, perf record -e arm_spe_0// and other SPE users get EBUSY; --no-collector.sampling.spe leaves it to them.", func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.sampling.spe) })
				o.Flag("aux-kib", "sampling.aux-kib", "Each CPU's Arm SPE AUX area in KiB (rounded up to a power of two pages): the records it holds until the exporter reads them; a full area stops the event until then (pmu_sampling_aux_lost_total{reason=\"truncated\"}).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.sampling.auxKiB, "256", 4, 1<<20) })
				o.Flag("max-lines", "sampling.max-lines", "Cache lines the shared-line table holds (/debug/cachelines); the coldest half is dropped when full.", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.sampling.maxLines, "1024", 2, 1<<24) })
			}},
		registry.Collector[*build]{Name: "platform", Default: true, Live: livePlatform, Replay: replayPlatform,
			Help: "Count the platform PMUs the host exposes, on the CPUs their cpumask names: energy by package and domain (power, RAPL), the free-running MSRs by CPU (msr: tsc, aperf, mperf for frequency and busy share), C-state residency (cstate_core, cstate_pkg), memory bandwidth (uncore_imc_*, amd_umc_*), NUMA and UPI traffic (uncore_cha_*, uncore_upi_*): pmu_node_*",
			Options: func(o registry.Options) {
				o.Flag("memory-peak", "", "Each package's peak memory bandwidth in bytes per second, where the operator knows it (channels × transfer rate × 8 bytes): exported as pmu_node_memory_peak_bytes_per_second for the dashboard to draw bandwidth against; 0 exports none, rather than a guess.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.memoryPeak, "0", 0, 1e15) })
			}},
		registry.Collector[*build]{Name: "comm", Default: true, Needs: []string{capability.SystemWide, capability.AddressSampling}, Live: liveComm, Replay: replayComm,
			Help: "Sample user-mode code on every CPU with its registers and decode each sampled instruction's memory operand (no precise PMU needed; where PEBS, IBS or SPE exist, their memory samples instead, with the width decoded): ComDetective's communication matrices with true and false sharing (/debug/comm), and the shared-line table where no precise sampler feeds it",
			Options: func(o registry.Options) {
				o.Flag("period", "", "Nanoseconds of CPU time between the address sampler's samples on each CPU (1000000: 1 kHz); the governor raises it beyond --collector.comm.cpu-budget. Where PEBS, IBS or SPE sample instead, --collector.sampling.period sets theirs.", func(fc *kingpin.FlagClause) { flagrange.Uint64(fc, &f.comm.period, "1000000", 10_000, 60_000_000_000) })
				o.Flag("window", "", "How many of a reader's own samples a published store stays fresh for (ComDetective's expiry); "+comdetect.WindowHelp()+" (docs/sampling.md).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.comm.window, "0", 0, 1<<20) })
				o.Flag("cpu-budget", "", "CPU the exporter may spend, in CPUs (0.01: 1% of one CPU), all of its CPU time counted; beyond it the address sampler's period rises, so what the other collectors and the watchpoints cost comes out of its samples.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.comm.budget, "0.01", 0.0001, 1024) })
				o.Flag("per-cgroup", "", "Record each sample's cgroup and export pmu_cgroup_comm_sampled_seconds_total (pmu_cgroup_comm_accesses_estimated_total from precise samples) per namespace, pod and container, bounded by --collector.cgroup.max-series.", func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.comm.perCgroup) })
				o.Flag("pods", "", "Which pods' tasks to sample: all (every task, as without Kubernetes), or annotated: only pods annotated pmu-exporter.io/comm=\"true\" on this node, each with perf's cgroup mode (needs --kubernetes.node-name); others are not sampled at all.", func(fc *kingpin.FlagClause) { fc.Default("all").EnumVar(&f.comm.pods, "all", "annotated") })
				o.Flag("watchpoints", "", "Add ComDetective's trap path in the selected workloads (--collector.comm.cgroup or --collector.comm.pods=annotated): a sampled store arms the debug registers of its process's other threads on its line; a trap is a communication. Needs watchpoints that fire (check: breakpoints) and CAP_PERFMON; each trap costs the workload ~25 µs here, within --collector.comm.watch-budget.", func(fc *kingpin.FlagClause) { fc.BoolVar(&f.comm.watchpoints) })
				o.Flag("reuse", "", "Run ReuseTracker on the selected workloads' watchpoints instead (reuse time distances between a sampled access and its thread's next access to the same bytes, and invalidations by other threads' stores): pmu_reuse_*. Exclusive with --collector.comm.watchpoints.", func(fc *kingpin.FlagClause) { fc.BoolVar(&f.comm.reuse) })
				o.Flag("reuse-mode", "", "private: reuse by the sampling thread itself (its private caches); shared: by another thread of its last-level cache domain (a shared cache), stores from other domains being invalidations.", func(fc *kingpin.FlagClause) { fc.Default("private").EnumVar(&f.comm.reuseMode, "private", "shared") })
				o.Flag("reuse-own", "", "Private mode: of each watched thread's debug registers, how many watch its own sampled accesses alone (they see its next touch, not other threads' stores); the rest are global, armed in every thread, and see the invalidations. 0: all global, as the thesis (docs/sampling.md).", func(fc *kingpin.FlagClause) {
					flagrange.Int(fc, &f.comm.reuseOwn, strconv.Itoa(reuse.DefaultOwn), 0, 4)
				})
				o.Flag("reuse-clock", "", "Private reuse distances in counts of these events (perf syntax, several joined by +), counted in each watched thread's group and read at its samples and traps, instead of its CPU time; accesses: the host's loads and stores (ReuseTracker's clock: Intel MEM_INST_RETIRED.ALL_LOADS+ALL_STORES, AMD ls_dispatch, Arm MEM_ACCESS), whose distances also give LRU stack distances and miss ratios (where no such events are known for the core PMU, its retired instructions; where no core PMU counts, the CPU time, with a warning); accesses=EVENTS: events of yours that count them. Empty: the thread's CPU time.", func(fc *kingpin.FlagClause) { fc.StringVar(&f.comm.reuseClock) })
				o.Flag("watch-budget", "", "The share of a watched process's CPU time its watchpoint traps may cost it (each trap's cost measured at start); a sample of a process over budget is used without watchpoints.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.comm.watchBudget, "0.01", 0.0001, 1) })
				o.Flag("decode-cache", "", "Memory the address decoder may keep of the instructions it decoded (those sampled, each process's own), beyond which those not sampled lately are dropped and decoded again if sampled again: pmu_address_decode_cache_bytes.", func(fc *kingpin.FlagClause) {
					flagrange.Bytes(fc, &f.comm.decodeCache, "32MiB", units.KiB, 16*units.GiB)
				})
				o.Flag("symbol-cache", "", "Memory the address decoder may keep of the sampled binaries' symbol tables, DWARF line tables and Go pclntabs (a process can declare a table of any size); a table that would pass it is not read, once the binaries no process maps are closed, and the binary's code is decoded without it: pmu_address_symbol_cache_bytes, pmu_address_symbol_tables_refused_total.", func(fc *kingpin.FlagClause) {
					flagrange.Bytes(fc, &f.comm.symbolCache, "64MiB", units.MiB, 16*units.GiB)
				})
				o.Flag("max-watched-threads", "", "Threads given watchpoint events at most (each holds one fd per debug register, a task-clock and a ring).", func(fc *kingpin.FlagClause) { flagrange.Int(fc, &f.comm.maxWatched, "256", 1, 1<<16) })
				o.Flag("cgroup", "", "Sample only this cgroup's tasks (path below the perf_event hierarchy, as in /proc/<pid>/cgroup; repeatable), with perf's cgroup mode: other workloads are not sampled at all. Default: every task.", func(fc *kingpin.FlagClause) { fc.StringsVar(&f.comm.cgroups) })
			}},
	)
	if err != nil {
		panic(err) // a programming error in the list above, caught by every test
	}
	return r
}

// treeLevelsHelp says how deep each built-in Top-Down tree goes. It is
// written out rather than read from the trees at start-up, which parses
// all of them (115 ms, on every command); TestTreeLevelsHelp holds it to
// topdown.Depths.
const treeLevelsHelp = "Built-in trees' levels: 1 (neoverse, neoverse-n2, neoverse-v1, neoverse-v2); 2 (zen4, zen5); 3 (grt, srf); 6 (adl, clx, emr, gnr, icl, icx, skl, skx, spr)"
