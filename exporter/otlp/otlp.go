// Package otlp pushes the exporter's metrics over OTLP (HTTP or gRPC): the
// same Prometheus registry that /metrics serves is read through
// OpenTelemetry's Prometheus bridge, so both outputs always agree, and its
// labels are renamed to the OpenTelemetry semantic conventions — the node
// as resource attributes (host.name, k8s.node.name), pods and containers as
// k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.container.name and
// container.id on their data points.
package otlp

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
)

// Options configure the push.
type Options struct {
	// Endpoint is the receiver's URL: http(s)://host:4318 for OTLP/HTTP
	// (/v1/metrics is added to a URL without a path), or with Protocol
	// "grpc", http(s)://host:4317.
	Endpoint string
	// Protocol is "http/protobuf" (the default) or "grpc".
	Protocol string
	Interval time.Duration
	// Resource attributes: the node.
	HostName, NodeName, Version string
}

// Pusher pushes the registry every Interval until Shutdown.
type Pusher struct {
	provider *sdkmetric.MeterProvider
}

// Start begins pushing what gatherer gathers.
func Start(ctx context.Context, gatherer promclient.Gatherer, opts Options) (*Pusher, error) {
	u, err := url.Parse(opts.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp.endpoint %q: want http(s)://host:port", opts.Endpoint)
	}
	var exp sdkmetric.Exporter
	switch opts.Protocol {
	case "", "http/protobuf":
		if u.Path == "" || u.Path == "/" { // a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
			u.Path = "/v1/metrics"
		}
		exp, err = otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(u.String()))
	case "grpc":
		exp, err = otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpointURL(opts.Endpoint))
	default:
		return nil, fmt.Errorf("--otlp.protocol %q: want grpc or http/protobuf", opts.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", opts.Endpoint, err)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName("pmu_exporter"), semconv.ServiceVersion(opts.Version)}
	if opts.HostName != "" {
		attrs = append(attrs, semconv.HostName(opts.HostName))
	}
	if opts.NodeName != "" {
		attrs = append(attrs, semconv.K8SNodeName(opts.NodeName))
	}
	interval := opts.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(interval),
		sdkmetric.WithProducer(Producer{promBridge.NewMetricProducer(promBridge.WithGatherer(gatherer))}))
	return &Pusher{provider: sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
		sdkmetric.WithReader(reader))}, nil
}

// Shutdown pushes once more and stops.
func (p *Pusher) Shutdown(ctx context.Context) error { return p.provider.Shutdown(ctx) }

// Producer renames a Prometheus producer's metrics to OpenTelemetry's
// conventions: counters lose the _total suffix that Prometheus adds back,
// and the pod labels become semantic-convention attributes.
type Producer struct {
	sdkmetric.Producer
}

// Produce implements sdkmetric.Producer.
func (p Producer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	scopes, err := p.Producer.Produce(ctx)
	for si := range scopes {
		for mi := range scopes[si].Metrics {
			m := &scopes[si].Metrics[mi]
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				if d.IsMonotonic {
					m.Name = strings.TrimSuffix(m.Name, "_total")
				}
				for i := range d.DataPoints {
					d.DataPoints[i].Attributes = Attributes(d.DataPoints[i].Attributes)
				}
			case metricdata.Gauge[float64]:
				for i := range d.DataPoints {
					d.DataPoints[i].Attributes = Attributes(d.DataPoints[i].Attributes)
				}
			}
		}
	}
	return scopes, err
}

// Attributes renames the cgroup collector's labels: namespace, pod and
// container to k8s.*, and from the cgroup path the pod UID and container ID.
// Where the API server gave no names, pod and container hold the UID and ID,
// which then only fill k8s.pod.uid and container.id.
func Attributes(in attribute.Set) attribute.Set {
	cgroup, ok := in.Value("cgroup")
	if !ok {
		return in
	}
	id, _ := podcgroup.Parse(cgroup.AsString())
	var out []attribute.KeyValue
	for it := in.Iter(); it.Next(); {
		kv := it.Attribute()
		v := kv.Value.AsString()
		switch kv.Key {
		case "namespace":
			if v != "" {
				out = append(out, semconv.K8SNamespaceName(v))
			}
		case "pod":
			if v != "" && v != id.PodUID {
				out = append(out, semconv.K8SPodName(v))
			}
		case "container":
			if v != "" && v != id.ContainerID {
				out = append(out, semconv.K8SContainerName(v))
			}
		default:
			out = append(out, kv)
		}
	}
	if id.PodUID != "" {
		out = append(out, semconv.K8SPodUID(id.PodUID))
	}
	if id.ContainerID != "" {
		out = append(out, semconv.ContainerID(id.ContainerID))
	}
	return attribute.NewSet(out...)
}
