// Command pmu_exporter counts CPU performance events on every CPU with
// perf_event_open and serves them to Prometheus; `pmu_exporter check` reports what
// this host can measure and how to fix what it cannot.
package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	webflag "github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/collector"
	"github.com/pmu-exporter/pmu_exporter/internal/flaglist"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
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
	opts          *collector.Options // what is counted and by which collectors
	telemetryPath string
	web           *web.FlagConfig
	maxRequests   int
	idleTimeout   time.Duration
	writeTimeout  time.Duration
	maxConns      int
	// collectTimeout bounds each collector's part of a scrape
	// (exporter.Bounded); cycleTimeout, how long a collector's cycle may
	// run before /-/healthy fails.
	collectTimeout, cycleTimeout time.Duration
	debug                        bool
	log                          *promslog.Config
	checkFormat                  string
	gomaxprocs                   int
	otlp                         otlpFlags
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
	mf                           commFlags
	rf                           reuseFlags
	reuseCmd                     *kingpin.CmdClause
	check, tdCmd, smpCmd, c2cCmd *kingpin.CmdClause
	valCmd                       *kingpin.CmdClause
	vf                           collector.ValidateFlags
	commCmd                      *kingpin.CmdClause
	terminated                   int // exit code --help or --version asked for; -1: none
}

// bindServeLimits declares what bounds serve's HTTP front end and its
// health: connections, a collector's time in a scrape, a cycle's time.
func bindServeLimits(serve *kingpin.CmdClause, f *flags) {
	flagrange.Int(serve.Flag("web.max-connections", "Most HTTP connections open at once, on each listen address; more wait in the kernel's backlog, holding none of the exporter's file descriptors, which are for perf events. Lowered at start to half the descriptors the open-file limit leaves free once the collectors have opened theirs. Clients that hold every connection without sending a request delay scrapes until the 10 s header timeout closes theirs."), &f.maxConns, "1024", 1, 1<<16)
	flagrange.Duration(serve.Flag("web.collect-timeout", "Longest a scrape waits for one collector's metrics; past it, that collector's metrics of the last complete collection are served and counted in pmu_scrape_stale_total{part} (a read stuck in the kernel, a lock held), so /metrics answers whatever a collector does."), &f.collectTimeout, "2s", 10*time.Millisecond, time.Minute)
	flagrange.Duration(serve.Flag("collector.cycle-timeout", "/-/healthy answers 503, naming the collector, while a collector's cycle (a read of the counters, a pass over the sampling rings) has run longer than this: the liveness probe then restarts an exporter stuck in the kernel."), &f.cycleTimeout, "1m", time.Second, 24*time.Hour)
}

// newApp declares every command and flag, bound to c.
func newApp(c *cli, stderr io.Writer) *kingpin.Application {
	f, td, sf, cf := &c.f, &c.td, &c.sf, &c.cf
	c.terminated = -1
	f.opts = collector.NewOptions()
	app := kingpin.New("pmu_exporter", "Counts CPU performance events on every CPU and exports them to Prometheus.")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	app.UsageFuncs(helpFuncs)
	app.UsageTemplate(helpTemplate)
	// --help and --version end the program: kingpin asks to exit, and run
	// returns instead (without it, the default command would go on).
	app.Terminate(func(code int) {
		if c.terminated < 0 {
			c.terminated = code
		}
	})
	app.Version(version.Print("pmu_exporter"))
	app.HelpFlag.Short('h')
	serve := app.Command("serve", "Count events and serve /metrics (the default).").Default()
	serve.Flag("otlp.endpoint", "Also push every metric over OTLP to this receiver URL (http://collector:4318; with --otlp.protocol=grpc, http://collector:4317), with OpenTelemetry's resource and k8s attribute names.").StringVar(&f.otlp.endpoint)
	serve.Flag("otlp.protocol", "OTLP transport: http/protobuf or grpc.").Default("http/protobuf").EnumVar(&f.otlp.protocol, "http/protobuf", "grpc")
	flagrange.Duration(serve.Flag("otlp.interval", "How often metrics are pushed over OTLP."), &f.otlp.interval, "30s", 100*time.Millisecond, time.Hour)
	serve.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&f.telemetryPath)
	flagrange.Int(serve.Flag("web.max-requests", "Maximum number of parallel scrape requests; further ones are answered 503 and counted in promhttp_metric_handler_requests_total{code=\"503\"} (0: no limit)."), &f.maxRequests, "40", 0, 1<<16)
	flagrange.Duration(serve.Flag("web.idle-timeout", "How long an idle keep-alive connection is kept before the exporter closes it (its file descriptors are needed for perf events)."), &f.idleTimeout, "30s", time.Second, time.Hour)
	bindServeLimits(serve, f)
	flagrange.Duration(serve.Flag("web.write-timeout", "Longest time to write one response, longer than the slowest scrape."), &f.writeTimeout, "2m", time.Second, time.Hour)
	serve.Flag("web.enable-debug", "Serve /debug/cachelines and /debug/comm (pids, tids, addresses and binary paths) and Go's /debug/pprof/, under the same web configuration (TLS, basic auth) as the metrics. Off by default: anyone who reaches the port could read them.").
		BoolVar(&f.debug)
	flagrange.Int(serve.Flag("runtime.gomaxprocs", "The target number of CPUs Go will run on (GOMAXPROCS); one keeps a per-node agent's own wake-ups cheap, as in node_exporter.").Envar("GOMAXPROCS"), &f.gomaxprocs, "1", 1, 1<<16)
	f.web = webflag.AddFlags(serve, defaultAddress)
	f.log = &promslog.Config{}

	c.check = app.Command("check", "Report what this host can measure, why not, and how to fix it; exit 0 if the exporter can run with every group its configuration asks for, 1 if not, 2 for a flag or path that names the wrong thing.")
	c.check.Flag("format", "Output format: text or json.").Default("text").EnumVar(&f.checkFormat, "text", "json")
	c.valCmd = app.Command("validate", "Run validation loops whose counts are known in advance (CAT's kernels): for each event the exporter would count, and those of --event, the slope of its count over a sweep of sizes, r² and goodness; pass, fail, or not measurable here and why; and the samplers (timer, page faults) on sampling loops whose events and addresses are known: accuracy, stability, bias, attribution, address, mode leak, loss. Exit 1 if an event or a sampler's figure failed.")
	c.valCmd.Flag("event", "Also validate this event (perf syntax; repeatable).").StringsVar(&c.vf.Events)
	c.valCmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&c.vf.Format, "text", "json")
	c.valCmd.Flag("quick", "Fewer and smaller sizes (what serve --validate.on-start runs).").BoolVar(&c.vf.Quick)
	flagrange.Int(c.valCmd.Flag("cpu", "CPU to run the kernels on (default: the last online CPU)."), &c.vf.CPU, "-1", -1, 1<<20)
	// check and validate judge what serve would run with the same collector flags.
	f.opts.Bind(serve, c.check, c.valCmd)
	logFlags(f.log, serve, c.check, c.valCmd)

	c.tdCmd = app.Command("topdown", "Compute Top-Down (levels 1 and 2; --level for more) from a `perf stat -x,` or `perf stat -j` recording (FILE, or - for standard input).")
	c.tdCmd.Flag("uarch", "Micro-architecture of the recording host: "+strings.Join(topdown.Names(), ", ")+" (default: this host's).").StringVar(&td.uarch)
	c.tdCmd.Flag("smt", "Whether the recording host ran two threads per core: on, off or auto (this host's).").Default("auto").EnumVar(&td.smt, "on", "off", "auto")
	flagrange.Float64(c.tdCmd.Flag("slots", "Slots per cycle of the recording host's cores (Arm: the PMU's caps/slots)."), &td.slots, "", 0, 64)
	flagrange.Float64(c.tdCmd.Flag("tsc-hz", "The recording host's TSC frequency in Hz, for Intel's nodes below level 3 that scale by the core frequency; measured here where the tree is this host's."), &td.tscHz, "", 0, 1e12)
	c.tdCmd.Flag("definitions", "YAML file with metrics that extend or override the built-in tree.").StringVar(&td.definitions)
	c.tdCmd.Flag("format", "Output format: table or json.").Default("table").EnumVar(&td.format, "table", "json")
	c.tdCmd.Flag("list-events", "Print the perf stat command that records what the tree needs, and exit.").BoolVar(&td.listEvents)
	flagrange.Int(c.tdCmd.Flag("level", "The deepest level to compute (0: every level the tree has), as toplev's -l; --list-events then records what it needs."), &td.level, "2", 0, 6)
	flaglist.Var(c.tdCmd.Flag("nodes", "Below level 1, only these nodes' subtrees and their ancestors (comma-separated or repeated), as toplev's --nodes."), &td.nodes)
	c.tdCmd.Flag("intervals", "Also print the tree of every interval, CPU and cgroup before the summary of the whole run (--format json has both always).").BoolVar(&td.intervals)
	c.tdCmd.Arg("file", "perf stat output to read; - reads standard input.").Default("-").StringVar(&td.input)
	f.opts.BindHostPaths(c.tdCmd) // the default tree is this host's

	c.smpCmd = app.Command("samples", "Print the samples of a perf.data file (perf record, perf mem record, perf c2c record; - reads a pipe-mode stream), one JSON object per line, in perf script's order, with data_src decoded.")
	c.smpCmd.Flag("input", "perf.data file to read; - reads a pipe-mode stream (perf record -o -) from standard input.").Short('i').Default("perf.data").StringVar(&sf.input)
	c.smpCmd.Flag("format", "Output format: jsonl.").Default("jsonl").EnumVar(&sf.format, "jsonl")
	c.smpCmd.Flag("symfs", "Read the recorded code (for the instruction at each sample's IP) under this directory, as perf script --symfs: the recording host's /usr/bin/x is DIR/usr/bin/x.").PlaceHolder("DIR").StringVar(&sf.symfs)
	c.smpCmd.Arg("file", "perf.data file to read instead of --input; - reads standard input.").StringVar(&sf.input)

	c.c2cCmd = app.Command("c2c", "Report the cache lines threads share, true and false sharing, from the memory samples of a perf.data file (perf c2c record, perf mem record), as /debug/cachelines does live.")
	c.c2cCmd.Flag("input", "perf.data file to read; - reads a pipe-mode stream from standard input.").Short('i').Default("perf.data").StringVar(&cf.input)
	c.c2cCmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&cf.format, "text", "json")
	flagrange.Int(c.c2cCmd.Flag("lines", "How many of the hottest lines to show."), &cf.lines, "20", 1, 1<<24)
	c.c2cCmd.Flag("display", "Rank lines by loads another core's cache served: any (HITM and peer snoops), or as perf c2c report -d: tot (HITM), lcl (local HITM), rmt (remote HITM), peer (peer snoops, Arm's), listing only the lines that have some.").Short('d').Default("any").EnumVar(&cf.display, cacheline.DisplayNames...)
	flagrange.Int(c.c2cCmd.Flag("max-lines", "Cache lines held at once; the coldest half is dropped when full."), &cf.max, "4096", 2, 1<<24)
	c.c2cCmd.Flag("symfs", "Read the recorded code (for the instruction at each sample's IP) under this directory, as perf script --symfs: the recording host's /usr/bin/x is DIR/usr/bin/x.").PlaceHolder("DIR").StringVar(&cf.symfs)
	c.c2cCmd.Arg("file", "perf.data file to read instead of --input; - reads standard input.").StringVar(&cf.input)

	mf := &c.mf
	c.commCmd = app.Command("comm", "Print ComDetective's communication matrices (thread × thread and CPU × CPU; all, true and false sharing) of a recording: perf record -e cpu-clock:u --user-regs="+amd64UserRegs+" (addresses decoded from the sampled instructions, no precise PMU needed), or perf mem record / perf c2c record.")
	c.commCmd.Flag("input", "perf.data file to read; - reads a pipe-mode stream from standard input.").Short('i').Default("perf.data").StringVar(&mf.input)
	c.commCmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&mf.format, "text", "json")
	flagrange.Int(c.commCmd.Flag("lines", "How many of the most shared lines to show per process."), &mf.lines, "10", 1, 1<<24)
	flagrange.Int(c.commCmd.Flag("window", "How many of a reader's own samples a published store stays fresh for ("+comdetect.WindowHelp()+")."), &mf.window, "0", 0, 1<<20)
	flagrange.Int(c.commCmd.Flag("pid", "Only this process (0: all)."), &mf.pid, "0", 0, 1<<22)
	c.commCmd.Flag("symfs", "Read the recorded code (for the instruction at each sample's IP) under this directory, as perf script --symfs: the recording host's /usr/bin/x is DIR/usr/bin/x.").PlaceHolder("DIR").StringVar(&mf.symfs)
	c.commCmd.Arg("file", "perf.data file to read instead of --input; - reads standard input.").StringVar(&mf.input)

	rf := &c.rf
	c.reuseCmd = app.Command("reuse", "Run ReuseTracker (sampled accesses, hardware watchpoints: reuse distances and invalidations) over an access trace, one access per line: TID R|W 0xADDR SIZE [NS] (NS, the thread's CPU time, is read and not used: distances are in accesses), with the debug registers' semantics.")
	c.reuseCmd.Flag("trace", "Trace file; - reads standard input.").Default("-").StringVar(&rf.trace)
	c.reuseCmd.Arg("file", "Trace file to read instead of --trace, as samples, c2c and comm take theirs; - reads standard input.").StringVar(&rf.trace)
	flagrange.Uint64(c.reuseCmd.Flag("period", "Each thread's accesses between samples, on average (uniform in [period/2, 3·period/2])."), &rf.period, "1000", 1, 1<<40)
	flagrange.Uint64(c.reuseCmd.Flag("arm-delay", "Accesses (of any thread) before a new watchpoint takes effect."), &rf.armDelay, "0", 0, 1<<40)
	flagrange.Uint64(c.reuseCmd.Flag("seed", "Seed of the sampling and reservoir randomisation."), &rf.seed, "1", 0, math.MaxUint64)
	flagrange.Int(c.reuseCmd.Flag("slots", "Debug registers per thread."), &rf.slots, "4", 1, 64)
	flagrange.Int(c.reuseCmd.Flag("own", "Of each thread's --slots, how many watch its own sampled accesses alone (private mode): they see its next touch but not another thread's store, which the others (global, armed in every thread) see; 0 is the thesis' all global."), &rf.own, strconv.Itoa(reuse.DefaultOwn), 0, 64)
	c.reuseCmd.Flag("mode", "private: reuse by the same thread; shared: by another thread of the same cache domain (--domain).").Default("private").EnumVar(&rf.mode, "private", "shared")
	c.reuseCmd.Flag("domain", "Threads' cache domains for --mode shared: TID=D,... (threads not listed share no cache).").StringVar(&rf.domains)
	c.reuseCmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&rf.format, "text", "json")
	c.reuseCmd.Flag("cache", "Also print the miss ratio of an LRU cache of this many data (distinct watched locations; repeatable), from the footprint of the reuse times.").Uint64ListVar(&rf.caches)

	return app
}

// logFlags adds --log.level and --log.format to the commands that log
// (promslogflag adds them to the whole application, where every offline
// command would list them and ignore them).
func logFlags(cfg *promslog.Config, cmds ...*kingpin.CmdClause) {
	cfg.Level, cfg.Format = promslog.NewLevel(), promslog.NewFormat()
	for _, c := range cmds {
		c.Flag(promslogflag.LevelFlagName, promslogflag.LevelFlagHelp).Default("info").HintOptions(promslog.LevelFlagOptions...).SetValue(cfg.Level)
		c.Flag(promslogflag.FormatFlagName, promslogflag.FormatFlagHelp).Default("logfmt").HintOptions(promslog.FormatFlagOptions...).SetValue(cfg.Format)
	}
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
	for _, in := range []*string{&c.sf.input, &c.cf.input, &c.mf.input, &c.rf.trace} {
		if *in == "" {
			*in = "-"
		}
	}
	deprecated := c.f.opts.Resolve()
	f, td, sf, cf := c.f, c.td, c.sf, c.cf
	f.log.Writer = stderr
	logger := promslog.New(f.log)
	for _, d := range deprecated {
		logger.Warn(d)
	}
	switch cmd {
	case c.check.FullCommand():
		if err := f.opts.CheckPaths(); err != nil {
			fmt.Fprintf(stderr, "pmu_exporter check: %v\n", err)
			return 2
		}
		return collector.RunCheck(*f.opts, f.checkFormat, stdout, stderr)
	case c.valCmd.FullCommand():
		if err := f.opts.CheckPaths(); err != nil {
			fmt.Fprintf(stderr, "pmu_exporter validate: %v\n", err)
			return 2
		}
		return collector.RunValidate(*f.opts, c.vf, stdout, stderr)
	case c.tdCmd.FullCommand():
		return runTopdown(f, td, os.Stdin, stdout, stderr)
	case c.smpCmd.FullCommand():
		return runSamples(sf, os.Stdin, stdout, stderr)
	case c.c2cCmd.FullCommand():
		return runC2C(cf, os.Stdin, stdout, stderr)
	case c.commCmd.FullCommand():
		return runComm(c.mf, os.Stdin, stdout, stderr)
	case c.reuseCmd.FullCommand():
		return runReuse(c.rf, os.Stdin, stdout, stderr)
	default:
		err := f.opts.CheckValues()
		if err == nil && f.opts.Source() != "replay" {
			err = f.opts.CheckPaths()
		}
		if err != nil {
			fmt.Fprintf(stderr, "pmu_exporter: %v\n", err)
			return 2
		}
		if err := serveMetrics(f, logger); err != nil {
			logger.Error("exporter stopped", "err", err)
			return 1
		}
		return 0
	}
}
