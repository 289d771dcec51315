package exporter

import (
	"compress/gzip"
	"fmt"
	"net/http"

	"github.com/klauspost/compress/gzhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves reg's metrics with at most maxRequests scrapes at once (0:
// no limit), instrumented as node_exporter's handler is
// (promhttp_metric_handler_requests_in_flight, _requests_total{code}, 503 for
// those rejected, and _errors_total{cause}); errorLog may be nil.
//
// Responses are compressed at gzip's fastest level (zstd where the client
// asks for it) rather than promhttp's default level: a node with a thousand
// cgroups exposes ~7 MB, which the default level takes ~29 ms of CPU to
// compress and the fastest ~6 ms, for a body 4-9% larger
// (docs/benchmarks.md).
func Handler(reg *prometheus.Registry, maxRequests int, errorLog promhttp.Logger) (http.Handler, error) {
	compress, err := gzhttp.NewWrapper(gzhttp.CompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, fmt.Errorf("metrics handler compression: %w", err)
	}
	return compress(promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            errorLog,
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: maxRequests,
		Registry:            reg,
		DisableCompression:  true,
	}))), nil
}
