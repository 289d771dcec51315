package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.opentelemetry.io/otel"
	"golang.org/x/time/rate"

	"github.com/pmu-exporter/pmu_exporter/collector"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/exporter/otlp"
)

func serveMetrics(f flags, logger *slog.Logger) error {
	// exporter-toolkit reads the web config only once serving, and its
	// errors do not name the file.
	if f.web.WebConfigFile != nil && *f.web.WebConfigFile != "" {
		if err := web.Validate(*f.web.WebConfigFile); err != nil {
			return fmt.Errorf("--web.config.file %s: %w", *f.web.WebConfigFile, err)
		}
	}
	logger.Info("starting pmu_exporter", "version", version.Info(), "build", version.BuildContext(), "counts_from", f.opts.Source())
	if f.gomaxprocs > 0 {
		runtime.GOMAXPROCS(f.gomaxprocs)
	}
	p, err := collector.Build(*f.opts, logger)
	if err != nil {
		return err
	}
	defer func() {
		// A collector stuck in the kernel may hold what Close needs:
		// the process ends anyway, and the kernel closes its fds.
		if !within(closeWait, p.Close) {
			logger.Error("collectors not closed on shutdown; exiting anyway", "waited", closeWait)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p.StartPods(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	reg := collector.NewRegistry(p, f.collectTimeout)
	if f.otlp.endpoint != "" {
		hostname, _ := os.Hostname()
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("OTLP push failed", "err", err) }))
		pusher, err := otlp.Start(ctx, reg, otlp.Options{Endpoint: f.otlp.endpoint, Protocol: f.otlp.protocol,
			Interval: f.otlp.interval, HostName: hostname, NodeName: f.opts.NodeName(), Version: version.Version})
		if err != nil {
			stop()
			<-done
			return err
		}
		logger.Info("pushing metrics over OTLP", "endpoint", f.otlp.endpoint, "protocol", f.otlp.protocol, "interval", f.otlp.interval)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := pusher.Shutdown(ctx); err != nil {
				logger.Warn("OTLP: last push failed", "err", err)
			}
		}()
	}
	return serveHTTP(ctx, stop, done, f, reg, p, logger)
}

// serveHTTP serves the registry with the exporter-toolkit's web
// configuration (TLS, basic auth) until ctx ends or the listener fails; done
// closes once the pipeline's loop has returned.
func serveHTTP(ctx context.Context, stop func(), done <-chan struct{}, f flags, reg *prometheus.Registry, p *collector.Pipeline, logger *slog.Logger) error {
	metrics, err := exporter.Handler(reg, f.maxRequests, slog.NewLogLogger(logger.Handler(), slog.LevelError))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(f.telemetryPath, p.WrapMetrics(metrics))
	mux.Handle("/-/healthy", healthy(p, f.cycleTimeout, logger))
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := p.Ready(); !ok {
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
		for _, h := range p.Handlers() {
			mux.Handle(h.Path, h.Handler)
			links = append(links, web.LandingLinks{Address: h.Path, Text: h.Title})
		}
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	} else if len(p.Handlers()) > 0 {
		logger.Info("debug endpoints are off; --web.enable-debug serves them", "paths", handlerPaths(p.Handlers()))
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
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: f.idleTimeout, WriteTimeout: f.writeTimeout,
		ErrorLog: newLimitedLog(logger, 10*time.Second)}
	listeners, closeListeners, err := limitedListeners(f.web, connectionCap(f.maxConns, p, logger))
	if err != nil {
		stop()
		<-done
		return err
	}
	defer closeListeners()
	errc := make(chan error, 1)
	go func() { errc <- web.ServeMultiple(listeners, server, f.web, logger) }()
	select {
	case err := <-errc:
		stop()
		awaitPipeline(done, p, logger)
		return err
	case <-ctx.Done():
		logger.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), httpShutdownWait)
		defer cancel()
		err := server.Shutdown(shutdownCtx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = server.Close() // scrapes still running: cut them
		}
		awaitPipeline(done, p, logger)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	}
}

// connectionCap is --web.max-connections, lowered where the open-file
// limit leaves less room: of the descriptors not yet open once the
// collectors have opened theirs, half at most go to HTTP connections (on
// every listen address together, roughly), the rest stay for what the
// collectors open later (a CPU that comes online, a sampled binary).
func connectionCap(asked int, p *collector.Pipeline, logger *slog.Logger) int {
	free, limit, ok := p.FreeFDs()
	if !ok || free/2 >= int64(asked) {
		return asked
	}
	capped := int(max(free/2, 4))
	logger.Warn("HTTP connections capped below --web.max-connections, to keep file descriptors for the collectors", "max_connections", capped, "asked", asked, "open_files_limit", limit, "free", free)
	return capped
}

// How long shutdown waits for each of its steps, within the 5 s a SIGTERM
// is given before a kubelet's own grace period matters: in-flight scrapes
// (each bounded by --web.collect-timeout), the collectors' loops, their
// Close. A step that is stuck (a read hung in the kernel) is logged and
// left: the process ends, and the kernel closes what it held.
const (
	httpShutdownWait = 2 * time.Second
	pipelineWait     = time.Second
	closeWait        = time.Second
)

// awaitPipeline waits for the collectors' loops to return, at most
// pipelineWait, and says which were stuck if they did not.
func awaitPipeline(done <-chan struct{}, p *collector.Pipeline, logger *slog.Logger) {
	select {
	case <-done:
	case <-time.After(pipelineWait):
		logger.Error("collectors did not stop on shutdown; exiting anyway", "waited", pipelineWait, "running", exporter.StuckText(p.Stuck(0)))
	}
}

// within runs f and says whether it returned within d (if not, it goes on
// in the background).
func within(d time.Duration, f func()) bool {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		f()
	}()
	select {
	case <-ended:
		return true
	case <-time.After(d):
		return false
	}
}

// healthy answers /-/healthy: 503 while a collector's cycle has run
// longer than bound (Pipeline.Stuck), naming it, which is logged at most
// once a minute; else 200.
func healthy(p *collector.Pipeline, bound time.Duration, logger *slog.Logger) http.Handler {
	said := rate.NewLimiter(rate.Every(time.Minute), 1)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if stuck := p.Stuck(bound); len(stuck) > 0 {
			why := exporter.StuckText(stuck)
			if said.Allow() {
				logger.Error("unhealthy: a collector's cycle has run past --collector.cycle-timeout", "bound", bound, "stuck", why)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "Unhealthy: cycle running past --collector.cycle-timeout ("+bound.String()+"): "+why+"\n")
			return
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "Healthy\n")
	})
}

func handlerPaths(hs []collector.Handler) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Path)
	}
	return out
}
