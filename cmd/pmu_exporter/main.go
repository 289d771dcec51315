// Command pmu_exporter counts CPU performance events on every CPU with
// perf_event_open and serves them to Prometheus; `pmu_exporter check` reports what
// this host can measure and how to fix what it cannot.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	webflag "github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/perfcount"
	"github.com/pmu-exporter/pmu_exporter/collectors/probe"
	"github.com/pmu-exporter/pmu_exporter/config"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/profile"
	"github.com/pmu-exporter/pmu_exporter/registry"
	"github.com/pmu-exporter/pmu_exporter/topdown"
)

const defaultAddress = ":9893"

func main() {
	stampVersion()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// stampVersion fills in the version where the build did not set it with
// -ldflags -X (scripts/build and make run do): the module version Go
// recorded, else "devel", so that pmu_build_info and the landing page never
// show an empty one.
func stampVersion() {
	if version.Version != "" {
		return
	}
	version.Version = "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version.Version = bi.Main.Version
	}
}

type flags struct {
	sysfs, procfs string
	configFile    string
	perCPU        bool
	interval      time.Duration
	telemetryPath string
	web           *web.FlagConfig
	maxRequests   int
	idleTimeout   time.Duration
	writeTimeout  time.Duration
	debug         bool
	log           *promslog.Config
	checkFormat   string
	gomaxprocs    int
	tree          treeOptions
	cgroups       cgroupOptions
	k8sNode       string
	kubeconfig    string
	source        string
	collectors    *registry.Registry[*build] // which collectors run
	replay        replayFlags
	otlp          otlpFlags
	sampling      samplingFlags
}

// treeOptions are the topdown collector's.
type treeOptions struct {
	enabled            bool
	uarch, definitions string
}

// cgroupOptions are the cgroup collector's (and the bounds per-cgroup
// sampling shares).
type cgroupOptions struct {
	enabled                      bool
	fsPath                       string // --path.cgroupfs
	depth, maxSeries, maxTracked int
	grace                        time.Duration
	perfMode                     []string
}

// otlpFlags are serve's --otlp.* options.
type otlpFlags struct {
	endpoint, protocol string
	interval           time.Duration
}

// cli is the command line: its commands and the options they fill.
type cli struct {
	f                            flags
	td                           topdownFlags
	sf                           samplesFlags
	cf                           c2cFlags
	check, tdCmd, smpCmd, c2cCmd *kingpin.CmdClause
	terminated                   int // exit code --help or --version asked for; -1: none
	collectors                   *registry.Registry[*build]
}

// newApp declares every command and flag, bound to c.
func newApp(c *cli, stderr io.Writer) *kingpin.Application {
	f, td, sf, cf := &c.f, &c.td, &c.sf, &c.cf
	c.terminated = -1
	c.collectors = collectorList(f)
	f.collectors = c.collectors
	app := kingpin.New("pmu_exporter", "Counts CPU performance events on every CPU and exports them to Prometheus.")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	// --help and --version end the program: kingpin asks to exit, and run
	// returns instead (without it, the default command would go on).
	app.Terminate(func(code int) {
		if c.terminated < 0 {
			c.terminated = code
		}
	})
	app.Version(version.Print("pmu_exporter"))
	app.HelpFlag.Short('h')
	app.Flag("path.sysfs", "sysfs mountpoint (in a container, the host's /sys mounted e.g. at /host/sys).").Default("/sys").StringVar(&f.sysfs)
	app.Flag("path.procfs", "procfs mountpoint (in a container, the host's /proc mounted e.g. at /host/proc).").Default("/proc").StringVar(&f.procfs)
	app.Flag("path.cgroupfs", "Mount point of the host's cgroup hierarchy that holds the perf_event controller: cgroup v2, or v1's perf_event hierarchy where v1 mounts it (default: found in mountinfo; in a container, the host's /sys/fs/cgroup mounted e.g. at /host/sys/fs/cgroup, or on v1 its perf_event directory, so that every cgroup id on the node resolves).").StringVar(&f.cgroups.fsPath)
	app.Flag("config.file", "YAML file listing extra events and groups to count.").StringVar(&f.configFile)

	serve := app.Command("serve", "Count events and serve /metrics (the default).").Default()
	serve.Flag("source", "Where counts come from: perf_event (this host's counters) or replay (a perf stat recording, --replay.file; pmu_info says source=\"replay\").").
		Default("perf_event").EnumVar(&f.source, "perf_event", "replay")
	serve.Flag("replay.file", "perf stat -I recording to play back with --source=replay (perf stat -x, or -j; -A per-CPU and -G cgroup columns are used when present), looping at the end.").StringVar(&f.replay.file)
	serve.Flag("replay.uarch", "Top-Down tree of the recording host for --source=replay: "+strings.Join(topdown.Names(), ", ")+" (default: none, counts only).").StringVar(&f.replay.uarch)
	serve.Flag("replay.smt", "Whether the recording host ran two threads per core (on or off).").Default("off").EnumVar(&f.replay.smt, "on", "off")
	serve.Flag("replay.slots", "Slots per cycle of the recording host's cores, for trees that need it (Arm: the PMU's caps/slots).").Float64Var(&f.replay.slots)
	serve.Flag("replay.samples", "perf.data file (perf mem record, perf c2c record) whose samples --source=replay serves as the sampling metrics and /debug/cachelines, read once at start.").StringVar(&f.replay.samples)
	serve.Flag("otlp.endpoint", "Also push every metric over OTLP to this receiver URL (http://collector:4318; with --otlp.protocol=grpc, http://collector:4317), with OpenTelemetry's resource and k8s attribute names.").StringVar(&f.otlp.endpoint)
	serve.Flag("otlp.protocol", "OTLP transport: http/protobuf or grpc.").Default("http/protobuf").EnumVar(&f.otlp.protocol, "http/protobuf", "grpc")
	serve.Flag("otlp.interval", "How often metrics are pushed over OTLP.").Default("30s").DurationVar(&f.otlp.interval)
	serve.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&f.telemetryPath)
	serve.Flag("web.max-requests", "Maximum number of parallel scrape requests; further ones are answered 503 and counted in promhttp_metric_handler_requests_total{code=\"503\"} (0: no limit).").
		Default("40").IntVar(&f.maxRequests)
	serve.Flag("web.idle-timeout", "How long an idle keep-alive connection is kept before the exporter closes it (its file descriptors are needed for perf events).").
		Default("30s").DurationVar(&f.idleTimeout)
	serve.Flag("web.write-timeout", "Longest time to write one response, longer than the slowest scrape.").Default("2m").DurationVar(&f.writeTimeout)
	serve.Flag("web.enable-debug", "Serve /debug/cachelines (pids, tids, addresses and binary paths) and Go's /debug/pprof/, under the same web configuration (TLS, basic auth) as the metrics. Off by default: anyone who reaches the port could read them.").
		BoolVar(&f.debug)
	serve.Flag("kubernetes.node-name", "This node's name: with it, pod and container names come from the Kubernetes API (pods of this node only; in a DaemonSet from the downward API, spec.nodeName). Without it, cgroup series carry pod UIDs and container IDs.").
		Envar("NODE_NAME").StringVar(&f.k8sNode)
	serve.Flag("kubernetes.kubeconfig", "kubeconfig for the Kubernetes API (default: the in-cluster service account).").StringVar(&f.kubeconfig)
	serve.Flag("runtime.gomaxprocs", "The target number of CPUs Go will run on (GOMAXPROCS); one keeps a per-node agent's own wake-ups cheap, as in node_exporter.").
		Envar("GOMAXPROCS").Default("1").IntVar(&f.gomaxprocs)
	c.collectors.Bind(serve)
	f.web = webflag.AddFlags(serve, defaultAddress)
	f.log = &promslog.Config{}
	promslogflag.AddFlags(app, f.log)

	c.check = app.Command("check", "Report what this host can measure, why not, and how to fix it; exit 0 if the exporter can run.")
	c.check.Flag("format", "Output format: text or json.").Default("text").EnumVar(&f.checkFormat, "text", "json")
	// check judges what serve would run with the same collector flags.
	c.collectors.Bind(c.check)

	c.tdCmd = app.Command("topdown", "Compute Top-Down levels 1 and 2 from a `perf stat -x,` or `perf stat -j` recording (FILE, or - for standard input).")
	c.tdCmd.Flag("uarch", "Micro-architecture of the recording host: "+strings.Join(topdown.Names(), ", ")+" (default: this host's).").StringVar(&td.uarch)
	c.tdCmd.Flag("smt", "Whether the recording host ran two threads per core: on, off or auto (this host's).").Default("auto").EnumVar(&td.smt, "on", "off", "auto")
	c.tdCmd.Flag("slots", "Slots per cycle of the recording host's cores (Arm: the PMU's caps/slots).").Float64Var(&td.slots)
	c.tdCmd.Flag("definitions", "YAML file with metrics that extend or override the built-in tree.").StringVar(&td.definitions)
	c.tdCmd.Flag("format", "Output format: table or json.").Default("table").EnumVar(&td.format, "table", "json")
	c.tdCmd.Flag("list-events", "Print the perf stat command that records what the tree needs, and exit.").BoolVar(&td.listEvents)
	c.tdCmd.Arg("file", "perf stat output to read; - reads standard input.").Default("-").StringVar(&td.input)

	c.smpCmd = app.Command("samples", "Print the samples of a perf.data file (perf record, perf mem record, perf c2c record; - reads a pipe-mode stream), one JSON object per line, in perf script's order, with data_src decoded.")
	c.smpCmd.Flag("input", "perf.data file to read; - reads a pipe-mode stream (perf record -o -) from standard input.").Short('i').Default("perf.data").StringVar(&sf.input)
	c.smpCmd.Flag("format", "Output format: jsonl.").Default("jsonl").EnumVar(&sf.format, "jsonl")
	c.smpCmd.Arg("file", "perf.data file to read instead of --input; - reads standard input.").StringVar(&sf.input)

	c.c2cCmd = app.Command("c2c", "Report the cache lines threads share, true and false sharing, from the memory samples of a perf.data file (perf c2c record, perf mem record), as /debug/cachelines does live.")
	c.c2cCmd.Flag("input", "perf.data file to read; - reads a pipe-mode stream from standard input.").Short('i').Default("perf.data").StringVar(&cf.input)
	c.c2cCmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&cf.format, "text", "json")
	c.c2cCmd.Flag("lines", "How many of the hottest lines to show.").Default("20").IntVar(&cf.lines)
	c.c2cCmd.Flag("max-lines", "Cache lines held at once; the coldest half is dropped when full.").Default("4096").IntVar(&cf.max)
	c.c2cCmd.Arg("file", "perf.data file to read instead of --input; - reads standard input.").StringVar(&cf.input)

	return app
}

func run(args []string, stdout, stderr io.Writer) int {
	var c cli
	app := newApp(&c, stderr)
	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "pmu_exporter: %v (try --help)\n", err)
		return 2
	}
	if c.terminated >= 0 || cmd == "" { // --help or --version
		return max(c.terminated, 0)
	}
	// kingpin hands a lone "-" (standard input) to a flag or argument as "".
	for _, in := range []*string{&c.sf.input, &c.cf.input} {
		if *in == "" {
			*in = "-"
		}
	}
	deprecated := c.collectors.Deprecated()
	c.f.tree.enabled, c.f.cgroups.enabled, c.f.sampling.enabled = c.collectors.Enabled("topdown"), c.collectors.Enabled("cgroup"), c.collectors.Enabled("sampling")
	f, td, sf, cf := c.f, c.td, c.sf, c.cf
	f.log.Writer = stderr
	logger := promslog.New(f.log)
	for _, d := range deprecated {
		logger.Warn(d)
	}
	switch cmd {
	case c.check.FullCommand():
		return runCheck(f, stdout, stderr)
	case c.tdCmd.FullCommand():
		return runTopdown(f, td, os.Stdin, stdout, stderr)
	case c.smpCmd.FullCommand():
		return runSamples(sf, os.Stdin, stdout, stderr)
	case c.c2cCmd.FullCommand():
		return runC2C(cf, os.Stdin, stdout, stderr)
	default:
		if f.interval <= 0 {
			fmt.Fprintf(stderr, "pmu_exporter: --collector.counting.interval must be positive, got %v\n", f.interval)
			return 2
		}
		if p := f.sampling.pages; p <= 0 || p&(p-1) != 0 {
			fmt.Fprintf(stderr, "pmu_exporter: --collector.sampling.ring-pages must be a power of two, got %d\n", p)
			return 2
		}
		if f.sampling.budget < 0 || f.sampling.period == 0 {
			fmt.Fprintf(stderr, "pmu_exporter: --collector.sampling.cpu-budget must not be negative and --collector.sampling.period must be positive, got %v and %d\n", f.sampling.budget, f.sampling.period)
			return 2
		}
		if err := serveMetrics(f, logger); err != nil {
			logger.Error("exporter stopped", "err", err)
			return 1
		}
		return 0
	}
}

// setup is what both commands need: the host, its PMUs, the capability verdict and
// the groups to count.
type setup struct {
	pmus         []*pmu.PMU
	facts        host.Facts
	report       capability.Report
	groups       []perfcount.GroupSpec
	configErrors []error
}

func discover(f flags) setup {
	var s setup
	s.facts = host.Read(f.procfs, f.sysfs)
	pmus, err := pmu.Discover(f.sysfs)
	if err != nil {
		s.facts.Errors = append(s.facts.Errors, err)
	}
	s.pmus = pmus
	s.report = capability.Build(s.facts, pmus, host.ReadCounters(s.facts.CPU.Vendor), probe.Live(s.facts))

	cfg := &config.Config{DefaultProfile: true}
	if f.configFile != "" {
		var err error
		if cfg, err = config.Load(f.configFile); err != nil {
			s.configErrors = append(s.configErrors, unjoin(err)...)
			if cfg == nil {
				cfg = &config.Config{DefaultProfile: true}
			}
		}
	}
	var groups []config.Group
	if cfg.DefaultProfile {
		groups = profile.Default(s.report.Feature(capability.HardwareCounters).Available)
	}
	groups = append(groups, cfg.Groups...)
	specs, err := profile.Build(groups, pmus)
	s.configErrors = append(s.configErrors, unjoin(err)...)
	s.groups = specs
	if note := fdNote(specs, s.facts.OnlineCPUs); note != "" {
		s.report.Notes = append(s.report.Notes, note)
	}
	return s
}

// fdNote warns when the groups need more file descriptors (one per event per CPU)
// than the open-file limit allows, before the kernel refuses them one by one.
func fdNote(groups []perfcount.GroupSpec, online []int) string {
	need := 0
	for _, g := range groups {
		cpus := len(online)
		if c := g.CPUs(); c != nil {
			cpus = 0
			for _, cpu := range c {
				if slices.Contains(online, cpu) {
					cpus++
				}
			}
		}
		need += len(g.Events) * cpus
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return ""
	}
	const reserve = 64 // listeners, scrapes, /proc and /sys reads
	if uint64(need+reserve) <= lim.Cur {
		return ""
	}
	return fmt.Sprintf("the event groups need %d file descriptors (one per event per CPU) but the open-file limit is %d: raise it (ulimit -n, LimitNOFILE=, or the container's nofile rlimit) or count fewer events",
		need, lim.Cur)
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
