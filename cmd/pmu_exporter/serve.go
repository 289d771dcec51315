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
	defer p.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p.StartPods(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	reg := collector.NewRegistry(p)
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
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "Healthy\n")
	})
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

func handlerPaths(hs []collector.Handler) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Path)
	}
	return out
}
