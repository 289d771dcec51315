package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.opentelemetry.io/otel"

	"github.com/pmu-exporter/pmu_exporter/collectors/cpubind"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfcount"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/exporter/otlp"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/registry"
	"github.com/pmu-exporter/pmu_exporter/topdown"
	"github.com/pmu-exporter/pmu_exporter/topdown/metric"
)

// liveTopdown is what serve needs to compute Top-Down: one tree per core type.
type liveTopdown struct {
	trees   []exporter.TopdownTree
	targets []placedTree // per core type, for per-cgroup Top-Down
	lives   []*topdown.Live
	groups  []perfcount.GroupSpec
	// warnings say which groups will not fit their CPUs' counters: the engine
	// will count their events one by one and ratios become estimates.
	warnings []string
}

// setupTopdown picks the trees (flag, else detected: one per core type on
// hybrids; a definitions file extends the first or, where none applies, is the
// tree), resolves their groups and parameters. The error says why Top-Down is
// not computed.
func setupTopdown(o treeOptions, sysfs string, s setup) (*liveTopdown, error) {
	if !o.enabled {
		return nil, errors.New("--no-collector.topdown")
	}
	var targets []topdown.Target
	switch {
	case o.uarch == "none":
		if o.definitions == "" {
			return nil, errors.New("--collector.topdown.uarch=none needs --collector.topdown.definitions")
		}
		targets = topdown.Place([]string{""}, s.pmus)
	case o.uarch != "":
		targets = topdown.Place(strings.Split(o.uarch, ","), s.pmus)
	default:
		t, err := topdown.ForHost(s.facts.CPU, s.pmus)
		if err != nil && o.definitions == "" {
			return nil, err
		}
		targets = t
		if err != nil { // the definitions file is the whole tree
			targets = topdown.Place([]string{""}, s.pmus)
		}
	}
	on := map[string]string{}
	for _, t := range targets {
		if other, ok := on[t.PMU]; ok {
			return nil, fmt.Errorf("trees %s and %s would both count on the same CPUs (core PMU %q); give one tree per core type", other, t.Uarch, cmp.Or(t.PMU, "cpu"))
		}
		on[t.PMU] = t.Uarch
	}
	td := &liveTopdown{}
	for i, t := range targets {
		var user string
		if i == 0 {
			user = o.definitions // extends the first tree: the P-core tree on hybrids
		}
		tree, err := setupTree(sysfs, s, t, user)
		if err != nil {
			if t.Uarch == "" { // the definitions file alone: its errors say where
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", t.Uarch, err)
		}
		td.trees = append(td.trees, exporter.TopdownTree{Src: tree.live, Info: tree.info})
		td.lives = append(td.lives, tree.live)
		td.targets = append(td.targets, tree.placedTree)
		td.groups = append(td.groups, tree.groups...)
		if tree.warning != "" {
			td.warnings = append(td.warnings, tree.warning)
		}
	}
	return td, nil
}

// placedTree is a compiled tree on its core PMU ("" on a host with one).
type placedTree struct {
	pmu    string
	tree   *metric.Tree
	params map[string]float64
}

// oneTree is one tree set up on its core PMU.
type oneTree struct {
	placedTree
	live    *topdown.Live
	info    exporter.TopdownInfo
	groups  []perfcount.GroupSpec
	warning string
}

// setupTree builds the tree of target t, extended or replaced by the user's
// definitions file when one is given.
func setupTree(sysfs string, s setup, t topdown.Target, userFile string) (*oneTree, error) {
	var def *metric.Definition
	if t.Uarch != "" {
		if !s.report.Feature(capability.HardwareCounters).Available {
			return nil, fmt.Errorf("the %s tree needs hardware counters: %s", t.Uarch, s.report.Feature(capability.HardwareCounters).Reason)
		}
		d, err := topdown.Builtin(t.Uarch)
		if err != nil {
			return nil, err
		}
		def = d
	}
	var tree *metric.Tree
	var err error
	if userFile != "" {
		b, rerr := os.ReadFile(userFile)
		if rerr != nil {
			return nil, &metric.UserError{File: userFile, Err: rerr}
		}
		if def, tree, err = metric.Extend(def, userFile, b); err != nil {
			return nil, err
		}
	} else if tree, err = def.Compile(); err != nil {
		return nil, err
	}
	groups, err := topdown.LiveGroups(def, s.pmus, t.PMU)
	if err != nil {
		return nil, err
	}
	params := map[string]float64{}
	info := exporter.TopdownInfo{Uarch: def.Name, Source: "events", SMT: "n/a"}
	if tree.Input("smt_on") >= 0 {
		on, err := host.SMTActive(sysfs)
		if err != nil {
			return nil, err
		}
		params["smt_on"], info.SMT = 0, "off"
		if on {
			params["smt_on"], info.SMT = 1, "on"
		}
	}
	if tree.Input("#slots") >= 0 {
		if params["#slots"] = topdown.CoreSlots(s.pmus); params["#slots"] == 0 {
			return nil, errors.New("the core PMU reports no caps/slots")
		}
	}
	for _, e := range def.Events {
		if strings.HasPrefix(e.Name, "PERF_METRICS.") {
			info.Source = "perf_metrics"
		}
	}
	out := &oneTree{placedTree: placedTree{pmu: t.PMU, tree: tree, params: params}, live: topdown.NewLive(tree, groups, params), info: info, groups: groups}
	counters := s.report.Counters
	if t.PMU != "" { // hybrid: ask a CPU of this core type
		for _, p := range s.pmus {
			if p.Name == t.PMU && len(p.CPUs) > 0 {
				if c, err := cpubind.CountersOn(s.facts.CPU.Vendor, p.CPUs[0]); err == nil {
					counters = c
				}
			}
		}
	}
	if counters.Known {
		if err := topdown.CheckFit(def, s.pmus, t.PMU, s.facts.CPU.Vendor == "GenuineIntel", counters.GeneralPurpose); err != nil {
			out.warning = err.Error()
		}
	}
	return out, nil
}

// pipeline is what serve exports: its collectors, the loop that feeds them,
// whether its first values are in, and what to release at the end.
type pipeline struct {
	collectors []prometheus.Collector
	run        func(ctx context.Context)
	ready      func() (bool, string)
	closers    []func()
	// startPods starts the pod-name informer (nil without the API).
	startPods func(ctx context.Context)
	// handlers are extra endpoints (/debug/cachelines).
	handlers []handler
	// cpuResets hear of CPUs whose events the counting engine reopened.
	cpuResets []func(cpu int)
	// step plays one recorded interval (replay only), as run does on its
	// clock: the golden exposition test plays a fixed number.
	step func()
	// health hears of every collector's cycles (pmu_collector_*).
	health *registry.Health
	// beside run with run until ctx ends (the sampler's reader); run
	// returns once they have, so that closers never pull a ring from under
	// its reader.
	beside []func(ctx context.Context)
}

func (p *pipeline) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

func serveMetrics(f flags, logger *slog.Logger) error {
	// exporter-toolkit reads the web config only once serving, and its
	// errors do not name the file.
	if f.web.WebConfigFile != nil && *f.web.WebConfigFile != "" {
		if err := web.Validate(*f.web.WebConfigFile); err != nil {
			return fmt.Errorf("--web.config.file %s: %w", *f.web.WebConfigFile, err)
		}
	}
	logger.Info("starting pmu_exporter", "version", version.Info(), "build", version.BuildContext(), "counts_from", f.source)
	if f.gomaxprocs > 0 {
		runtime.GOMAXPROCS(f.gomaxprocs)
	}
	var p *pipeline
	var err error
	if f.source == "replay" {
		p, err = replayPipeline(f, logger)
	} else {
		p = livePipeline(f, logger)
	}
	if err != nil {
		return err
	}
	defer p.close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if p.startPods != nil {
		p.startPods(ctx)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx)
	}()
	reg := newRegistry(p)
	if f.otlp.endpoint != "" {
		hostname, _ := os.Hostname()
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("OTLP push failed", "err", err) }))
		pusher, err := otlp.Start(ctx, reg, otlp.Options{Endpoint: f.otlp.endpoint, Protocol: f.otlp.protocol,
			Interval: f.otlp.interval, HostName: hostname, NodeName: f.k8sNode, Version: version.Version})
		if err != nil {
			stop()
			<-done
			return err
		}
		logger.Info("pushing metrics over OTLP", "endpoint", f.otlp.endpoint, "protocol", f.otlp.protocol, "interval", f.otlp.interval)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := pusher.Shutdown(ctx); err != nil {
				logger.Warn("OTLP: last push failed", "err", err)
			}
		}()
	}
	return serveHTTP(ctx, stop, done, f, reg, p, logger)
}

// newRegistry holds the pipeline's collectors and the exporter's own: build
// information, the Go runtime and the process.
func newRegistry(p *pipeline) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.collectors...)
	reg.MustRegister(
		versioncollector.NewCollector("pmu"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// serveHTTP serves the registry with the exporter-toolkit's web
// configuration (TLS, basic auth) until ctx ends or the listener fails; done
// closes once the pipeline's loop has returned.
func serveHTTP(ctx context.Context, stop func(), done <-chan struct{}, f flags, reg *prometheus.Registry, p *pipeline, logger *slog.Logger) error {
	metrics, err := exporter.Handler(reg, f.maxRequests, slog.NewLogLogger(logger.Handler(), slog.LevelError))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(f.telemetryPath, metrics)
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "Healthy\n")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := p.ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "Not ready: "+why+"\n")
			return
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "Ready\n")
	})
	links := []web.LandingLinks{
		{Address: f.telemetryPath, Text: "Metrics"},
		{Address: "/-/healthy", Text: "Health"},
		{Address: "/-/ready", Text: "Readiness"},
	}
	if f.debug {
		for _, h := range p.handlers {
			mux.Handle(h.path, h.h)
			links = append(links, web.LandingLinks{Address: h.path, Text: h.title})
		}
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	} else if len(p.handlers) > 0 {
		logger.Info("debug endpoints are off; --web.enable-debug serves them", "paths", handlerPaths(p.handlers))
	}
	if f.telemetryPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "PMU Exporter",
			Description: "CPU performance-monitoring counters from perf_event_open, for Prometheus",
			Version:     version.Info(),
			Links:       links,
			Profiling:   strconv.FormatBool(f.debug),
		})
		if err != nil {
			return fmt.Errorf("landing page: %w", err)
		}
		mux.Handle("/", landing)
	}
	// Idle keep-alive connections are closed: any pod may reach the port, and
	// the exporter's file descriptors are for perf events.
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: f.idleTimeout, WriteTimeout: f.writeTimeout}
	errc := make(chan error, 1)
	go func() { errc <- web.ListenAndServe(server, f.web, logger) }()
	select {
	case err := <-errc:
		stop()
		<-done
		return err
	case <-ctx.Done():
		logger.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := server.Shutdown(shutdownCtx)
		<-done
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	}
}

func handlerPaths(hs []handler) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.path)
	}
	return out
}

// measuring says whether any group is open on any CPU, or why none is: a
// pod that measures nothing is alive (/-/healthy) but not ready.
func measuring(s perfcount.Snapshot) (bool, string) {
	reasons := map[string]int{}
	for _, g := range s.Groups {
		if g.OpenCPUs > 0 {
			return true, ""
		}
		for r, n := range g.Failures {
			reasons[string(r)] += n
		}
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%s on %d group CPUs", r, reasons[r]))
	}
	return false, "no event group could be opened (" + cmp.Or(strings.Join(parts, ", "), "no group configured") + "); see pmu_group_open_failures and pmu_exporter check"
}
