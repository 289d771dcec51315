package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/pmu-exporter/pmu_exporter/capability"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfcount"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/metric"
	"github.com/pmu-exporter/pmu_exporter/topdown"
)

// liveTopdown is what serve needs to compute Top-Down.
type liveTopdown struct {
	live   *topdown.Live
	groups []perfcount.GroupSpec
	info   exporter.TopdownInfo
	// warning, if set, says a group will not fit this CPU's counters: the
	// engine will count its events one by one and ratios become estimates.
	warning string
}

// setupTopdown picks the tree (flag, else detected; a definitions file extends
// it or, where none applies, is the tree), resolves its groups and parameters.
// The error says why Top-Down is not computed.
func setupTopdown(f flags, s setup) (*liveTopdown, error) {
	if !f.topdown {
		return nil, errors.New("--no-collector.topdown")
	}
	var def *metric.Definition
	uarch := f.tdUarch
	if uarch == "none" {
		if f.tdDef == "" {
			return nil, errors.New("--topdown.uarch=none needs --topdown.definitions")
		}
		uarch = ""
	} else if uarch == "" {
		u, err := topdown.ForHost(s.facts.CPU, s.pmus)
		if err != nil && f.tdDef == "" {
			return nil, err
		}
		uarch = u
	}
	if uarch != "" {
		if !s.report.Feature(capability.HardwareCounters).Available {
			return nil, fmt.Errorf("the %s tree needs hardware counters: %s", uarch, s.report.Feature(capability.HardwareCounters).Reason)
		}
		d, err := topdown.Builtin(uarch)
		if err != nil {
			return nil, err
		}
		def = d
	}
	if f.tdDef != "" {
		b, err := os.ReadFile(f.tdDef)
		if err != nil {
			return nil, fmt.Errorf("--topdown.definitions: %w", err)
		}
		user, err := metric.Parse(f.tdDef, b)
		if err != nil {
			return nil, err
		}
		if def == nil {
			def = user
		} else {
			def = def.Override(user)
		}
	}
	tree, err := def.Compile()
	if err != nil {
		return nil, err
	}
	corePMU := ""
	for _, p := range s.pmus {
		if p.Name == "cpu_core" {
			corePMU = "cpu_core" // hybrid: the P-core tree
		}
	}
	groups, err := topdown.LiveGroups(def, s.pmus, corePMU)
	if err != nil {
		return nil, err
	}
	params := map[string]float64{}
	info := exporter.TopdownInfo{Uarch: def.Name, Source: "events", SMT: "n/a"}
	if tree.Input("smt_on") >= 0 {
		on, err := host.SMTActive(f.sysfs)
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
	td := &liveTopdown{live: topdown.NewLive(tree, groups, params), groups: groups, info: info}
	if c := s.report.Counters; c.Known {
		if err := topdown.CheckFit(def, s.pmus, s.facts.CPU.Vendor == "GenuineIntel", c.GeneralPurpose); err != nil {
			td.warning = err.Error()
		}
	}
	return td, nil
}

func serveMetrics(f flags, logger *slog.Logger) error {
	logger.Info("starting pmu_exporter", "version", version.Info(), "build", version.BuildContext())
	if f.gomaxprocs > 0 {
		runtime.GOMAXPROCS(f.gomaxprocs)
	}
	s := discover(f)
	for _, feat := range s.report.Features {
		if feat.Available {
			logger.Info("capability available", "feature", feat.Name, "detail", feat.Detail)
		} else {
			logger.Warn("capability missing", "feature", feat.Name, "reason", feat.Reason, "fix", feat.Fix)
		}
	}
	for _, n := range s.report.Notes {
		logger.Warn(n)
	}
	for _, e := range s.configErrors {
		logger.Error("configuration problem; the group is not counted", "err", e)
	}

	td, err := setupTopdown(f, s)
	if err != nil {
		logger.Info("Top-Down not computed", "reason", err)
	} else {
		logger.Info("Top-Down computed", "tree", td.info.Uarch, "from", td.info.Source, "smt", td.info.SMT)
		if td.warning != "" {
			logger.Warn("Top-Down group does not fit the counters; its events will be multiplexed", "problem", td.warning)
		}
		s.groups = append(s.groups, td.groups...)
	}

	readDuration := exporter.NewReadDurationHistogram()
	online := host.NewOnlineCPUsReader(f.sysfs)
	defer online.Close()
	var engine *perfcount.Engine
	afterCycle := func() {}
	if td != nil {
		afterCycle = func() { td.live.Update(engine.Snapshot()) }
	}
	engine = perfcount.New(perfcount.Options{
		Groups:      s.groups,
		OnlineCPUs:  online.Read,
		ObserveRead: readDuration.Observe,
		Logger:      logger,
		AfterCycle:  afterCycle,
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		engine.Run(ctx, f.interval)
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		exporter.New(engine, s.report, exporter.Options{PerCPU: f.perCPU, ConfigErrors: len(s.configErrors)}),
		readDuration,
		versioncollector.NewCollector("pmu_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if td != nil {
		reg.MustRegister(exporter.NewTopdown(td.live, td.info, f.perCPU))
	}
	mux := http.NewServeMux()
	mux.Handle(f.telemetryPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 10,
		Registry:            reg,
	}))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "Healthy\n")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		// The first cycle opens the groups, the second reads the first values.
		if engine.Cycles() < 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "Not ready: no counts have been read yet\n")
			return
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "Ready\n")
	})
	if f.telemetryPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "PMU Exporter",
			Description: "CPU performance-monitoring counters from perf_event_open, for Prometheus",
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: f.telemetryPath, Text: "Metrics"},
				{Address: "/-/healthy", Text: "Health"},
				{Address: "/-/ready", Text: "Readiness"},
			},
		})
		if err != nil {
			return fmt.Errorf("landing page: %w", err)
		}
		mux.Handle("/", landing)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
