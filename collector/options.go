// Package collector puts the exporter together: the collectors of the
// registry, each set up by its live or replay factory over a shared build,
// the counting engine they hang on, and what they export; and the check
// report that judges the same collectors and options. The binary keeps the
// command line and HTTP.
//
// A collector is one file named after it (counting.go, topdown.go,
// cgroup.go, sampling.go, platform.go, comm.go): its registry entry with
// its --collector.<name>.* flags (<name>Entry), its flag struct, its live
// factory and its replay factory; comm's helpers sit beside it in comm_*.go.
// collectors.go lists the entries in set-up order. pipeline.go holds the
// Pipeline the binary serves and the live build the factories share,
// replay.go the replay build, setup.go what the host is (setup), options.go
// the flags every collector shares, check.go and validate*.go the check and
// validate subcommands' engines.
package collector

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podmeta"
)

// Options are what is counted, where from and by which collectors, bound to
// their flags by Bind.
type Options struct {
	sysfs, procfs       string
	configFile          string
	perCPU              bool
	interval            time.Duration
	hotplugUevents      bool // follow CPU hotplug by the kernel's uevents (cpuhotplug)
	infoEvents          bool // also count the Info metrics' inputs (profile.Info)
	tree                treeFlags
	cgroups             cgroupFlags
	k8sNode, kubeconfig string
	source              string
	collectors          *registry.Registry[*build] // which collectors run
	replay              replayFlags
	sampling            samplingFlags
	comm                commFlags
	// memoryPeak is each package's peak memory bandwidth in bytes/s, as the
	// operator knows it (0: not known, no peak is exported).
	memoryPeak      float64
	validateOnStart bool
}

// NewOptions lists the collectors, their options bound to the result.
func NewOptions() *Options {
	o := &Options{}
	o.collectors = collectorList(o)
	return o
}

// Bind declares the host paths, the config file and every collector's
// flags on serve and on its judges (check and validate judge what serve
// would run), and the sources and Kubernetes access on serve: a command
// lists only the flags it uses.
func (o *Options) Bind(serve *kingpin.CmdClause, judges ...*kingpin.CmdClause) {
	for _, c := range append([]*kingpin.CmdClause{serve}, judges...) {
		o.BindHostPaths(c)
		c.Flag("path.cgroupfs", "Mount point of the host's cgroup hierarchy that holds the perf_event controller: cgroup v2, or v1's perf_event hierarchy where v1 mounts it (default: found in mountinfo; in a container, the host's /sys/fs/cgroup mounted e.g. at /host/sys/fs/cgroup, or on v1 its perf_event directory, so that every cgroup id on the node resolves).").StringVar(&o.cgroups.fsPath)
		c.Flag("config.file", "YAML file listing extra events and groups to count.").StringVar(&o.configFile)
	}
	serve.Flag("source", "Where counts come from: perf_event (this host's counters) or replay (a perf stat recording, --replay.file; pmu_info says source=\"replay\").").
		Default("perf_event").EnumVar(&o.source, "perf_event", "replay")
	serve.Flag("replay.file", "perf stat -I recording to play back with --source=replay (perf stat -x, or -j; -A per-CPU and -G cgroup columns are used when present), looping at the end.").StringVar(&o.replay.file)
	serve.Flag("replay.uarch", "Top-Down tree of the recording host for --source=replay: "+strings.Join(topdown.Names(), ", ")+" (default: none, counts only).").StringVar(&o.replay.uarch)
	serve.Flag("replay.smt", "Whether the recording host ran two threads per core (on or off).").Default("off").EnumVar(&o.replay.smt, "on", "off")
	flagrange.Float64(serve.Flag("replay.slots", "Slots per cycle of the recording host's cores, for trees that need it (Arm: the PMU's caps/slots)."), &o.replay.slots, "", 0, 64)
	flagrange.Float64(serve.Flag("replay.tsc-hz", "The recording host's TSC frequency in Hz, for Intel's Top-Down nodes below level 3 that scale by the core frequency (contested_accesses, l3_hit_latency…)."), &o.replay.tscHz, "", 0, 1e12)
	serve.Flag("replay.samples", "perf.data file (perf mem record, perf c2c record) whose samples --source=replay serves as the sampling metrics and /debug/cachelines, read once at start.").StringVar(&o.replay.samples)
	serve.Flag("replay.trace", "Access trace (TID R|W 0xADDR SIZE a line, as pmu_exporter reuse --trace reads it) whose ReuseTracker outcomes --source=replay serves as pmu_reuse_* (distances in accesses), run once at start on simulated debug registers.").StringVar(&o.replay.trace)
	serve.Flag("replay.symfs", "Read the code of --replay.samples' timer samples (the instruction at each sampled IP) under this directory, as perf script --symfs: the recording host's /usr/bin/x is DIR/usr/bin/x.").PlaceHolder("DIR").StringVar(&o.replay.symfs)
	serve.Flag("replay.validation", "The output of `pmu_exporter validate --format json` on the recording host, served as pmu_event_validation_* and pmu_event_multiplex_error_ratio: how far its events could be trusted.").PlaceHolder("FILE").StringVar(&o.replay.validation)
	flagrange.Duration(serve.Flag("replay.trap-cost", "What one trap of --replay.trace's watchpoints costs its thread (e.g. the recording host's pmu_comm_watchpoint_trap_cost_seconds): the trace's ReuseTracker then runs under the watchpoint governor, within --collector.comm.watch-budget of the CPU time its accesses give (a fifth field on every line), and serves the governor's pmu_comm_watchpoint_* as live. 0: ungoverned."), &o.replay.trapCost, "0s", 0, time.Second)
	serve.Flag("replay.self", "Scrapes of the recording host's exporter (two or more, each after a line '# scraped at UNIX_SECONDS'; internal/examplegen/self/record.sh makes one) whose own eBPF attribution families (pmu_self_bpf_*, pmu_cgroup_switches_missed_total), which a replay does not run, are served as that host had them: counters rising at their rate between the first and the last scrape.").PlaceHolder("FILE").StringVar(&o.replay.self)
	flagrange.Uint64(serve.Flag("replay.trace-period", "Each thread's accesses between the samples taken of --replay.trace, on average."), &o.replay.tracePeriod, "1000", 1, 1<<40)
	serve.Flag("kubernetes.node-name", "This node's name: with it, pod and container names come from the Kubernetes API (pods of this node only; in a DaemonSet from the downward API, spec.nodeName). Without it, cgroup series carry pod UIDs and container IDs.").
		Envar("NODE_NAME").StringVar(&o.k8sNode)
	serve.Flag("kubernetes.kubeconfig", "kubeconfig for the Kubernetes API (default: the in-cluster service account).").StringVar(&o.kubeconfig)
	o.collectors.Bind(serve)
	for _, c := range judges { // check and validate judge what serve would run
		o.collectors.Bind(c)
	}
	serve.Flag("validate.on-start", "Run the quick subset of `pmu_exporter validate` once at start (a few seconds, on one CPU) and export pmu_event_validation_goodness and pmu_event_validation_passed, and the samplers' verdicts (pmu_sampler_validation_ratio, pmu_sampler_validation_passed, pmu_sampler_validated).").BoolVar(&o.validateOnStart)
}

// BindHostPaths adds --path.sysfs and --path.procfs to cmd: where the
// host is read (in a container, its mounts of the host's), for a command
// that reads it (topdown's default tree is this host's).
func (o *Options) BindHostPaths(cmd *kingpin.CmdClause) {
	cmd.Flag("path.sysfs", "sysfs mountpoint (in a container, the host's /sys mounted e.g. at /host/sys).").Default("/sys").StringVar(&o.sysfs)
	cmd.Flag("path.procfs", "procfs mountpoint (in a container, the host's /proc mounted e.g. at /host/proc).").Default("/proc").StringVar(&o.procfs)
}

// Resolve settles the collectors' choices after parsing and returns a note
// for each flag given by its deprecated name.
func (o *Options) Resolve() []string {
	o.tree.enabled, o.cgroups.enabled, o.sampling.enabled = o.collectors.Enabled("topdown"), o.collectors.Enabled("cgroup"), o.collectors.Enabled("sampling")
	return o.collectors.Deprecated()
}

// CheckValues refuses option values serve cannot run with (flag checks;
// "validate" is CAT's validation of the counters).
func (o *Options) CheckValues() error {
	if o.interval <= 0 {
		return fmt.Errorf("--collector.counting.interval must be positive, got %v", o.interval)
	}
	if o.tree.level < 0 || o.tree.level > 6 || o.tree.cgroupLevel < 0 || o.tree.cgroupLevel > 6 {
		return fmt.Errorf("--collector.topdown.level and --collector.topdown.cgroup-level are levels 0 (all) to 6, got %d and %d", o.tree.level, o.tree.cgroupLevel)
	}
	if p := o.sampling.pages; p <= 0 || p&(p-1) != 0 {
		return fmt.Errorf("--collector.sampling.ring-pages must be a power of two, got %d", p)
	}
	if o.sampling.budget < 0 || o.sampling.period == 0 {
		return errors.New("--collector.sampling.cpu-budget must not be negative and --collector.sampling.period must be positive, got " +
			fmt.Sprint(o.sampling.budget) + " and " + fmt.Sprint(o.sampling.period))
	}
	return nil
}

// CheckPaths refuses a path flag that names the wrong thing, before
// anything is read through it: a sysfs without the CPUs, a procfs
// without processes, a cgroupfs that is no cgroup hierarchy, a config
// file or kubeconfig that is not there. Each error names its flag.
func (o *Options) CheckPaths() error {
	var errs []error
	want := func(flag, path, inside, what string) {
		if _, err := os.Stat(filepath.Join(path, inside)); err != nil {
			errs = append(errs, fmt.Errorf("--%s=%s is not %s: no %s there (%w)", flag, path, what, inside, err))
		}
	}
	want("path.sysfs", o.sysfs, "devices/system/cpu/online", "a sysfs")
	want("path.procfs", o.procfs, "self/stat", "a procfs")
	if o.cgroups.fsPath != "" {
		want("path.cgroupfs", o.cgroups.fsPath, "cgroup.procs", "a cgroup hierarchy")
	}
	regular := func(flag, path string) {
		if path == "" {
			return
		}
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		case !fi.Mode().IsRegular():
			errs = append(errs, fmt.Errorf("--%s=%s is not a regular file (%s)", flag, path, fi.Mode().Type()))
		}
	}
	regular("config.file", o.configFile)
	regular("kubernetes.kubeconfig", o.kubeconfig)
	if len(errs) == 0 && o.kubeconfig != "" {
		if _, err := podmeta.Client(o.kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubernetes.kubeconfig=%s: %w", o.kubeconfig, err))
		}
	}
	return errors.Join(errs...)
}

// Sysfs and Procfs are the host paths (--path.sysfs, --path.procfs).
func (o *Options) Sysfs() string  { return o.sysfs }
func (o *Options) Procfs() string { return o.procfs }

// Source is where counts come from: perf_event or replay.
func (o *Options) Source() string { return o.source }

// NodeName is this node's Kubernetes name, if given.
func (o *Options) NodeName() string { return o.k8sNode }
