package otlp

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/replay"
)

// registry serves the hand-written skx recording after one interval, through
// the exporter's real collectors: the container's retiring slots are its
// UOPS_RETIRED.RETIRE_SLOTS, 1000, and the node's CPU_CLK_UNHALTED.THREAD
// is 1000 + 500 (see replay/testdata/skx-handmade.csv).
func registry(t *testing.T) *prometheus.Registry {
	t.Helper()
	f, err := os.Open("../../replay/testdata/skx-handmade.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec, err := replay.Load("skx-handmade.csv", f)
	if err != nil {
		t.Fatal(err)
	}
	def, _ := topdown.Builtin("skx")
	tree, err := def.Compile()
	if err != nil {
		t.Fatal(err)
	}
	p := replay.NewPlayer(rec, tree, map[string]float64{"smt_on": 0})
	p.Step()
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.New(p, capability.Report{CorePMU: "skx"}, exporter.Options{Source: "replay"}),
		exporter.NewCgroup(p.Cgroups(), p.Cgroups(), exporter.Recorded))
	return reg
}

// receiver keeps the requests an OTLP endpoint got.
type receiver struct {
	colmetricpb.UnimplementedMetricsServiceServer
	mu   sync.Mutex
	reqs []*colmetricpb.ExportMetricsServiceRequest
	got  chan struct{}
}

func newReceiver() *receiver { return &receiver{got: make(chan struct{}, 100)} }

func (r *receiver) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	r.got <- struct{}{}
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// ServeHTTP is OTLP/HTTP's /v1/metrics with protobuf bodies.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var m colmetricpb.ExportMetricsServiceRequest
	if req.URL.Path != "/v1/metrics" || proto.Unmarshal(body, &m) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	r.Export(req.Context(), &m)
	b, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

func (r *receiver) first(t *testing.T) *colmetricpb.ExportMetricsServiceRequest {
	t.Helper()
	select {
	case <-r.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no OTLP request in 10 s")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[0]
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.Key] = kv.Value.GetStringValue()
	}
	return out
}

func check(t *testing.T, req *colmetricpb.ExportMetricsServiceRequest) {
	t.Helper()
	if len(req.ResourceMetrics) != 1 {
		t.Fatalf("%d resources", len(req.ResourceMetrics))
	}
	rm := req.ResourceMetrics[0]
	res := attrs(rm.Resource.Attributes)
	if res["host.name"] != "node-a" || res["k8s.node.name"] != "node-a" || res["service.name"] != "pmu_exporter" || res["service.version"] != "1.2.3" {
		t.Errorf("resource %v", res)
	}
	metrics := map[string]*metricpb.Metric{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			metrics[m.Name] = m
		}
	}
	slots := metrics["pmu_cgroup_topdown_slots"]
	if slots == nil || slots.GetSum() == nil || !slots.GetSum().IsMonotonic ||
		slots.GetSum().AggregationTemporality != metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
		t.Fatalf("pmu_cgroup_topdown_slots is not a cumulative monotonic sum: %v", slots)
	}
	found := false
	for _, dp := range slots.GetSum().DataPoints {
		a := attrs(dp.Attributes)
		if a["category"] != "retiring" {
			continue
		}
		found = true
		want := map[string]string{"k8s.namespace.name": "shop", "k8s.pod.name": "checkout-7d9f", "k8s.container.name": "web",
			"k8s.pod.uid":  "0b5b7a4e-1f0c-4b8e-9a51-3d2c1e0f9a77",
			"container.id": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("%s = %q, want %q", k, a[k], v)
			}
		}
		for _, k := range []string{"namespace", "pod", "container"} {
			if _, ok := a[k]; ok {
				t.Errorf("Prometheus label %s left in: %v", k, a)
			}
		}
		if v := dp.GetAsDouble(); v != 1000 {
			t.Errorf("retiring slots %v, want 1000", v)
		}
	}
	if !found {
		t.Error("no retiring data point")
	}
	events := metrics["pmu_events"]
	if events == nil {
		t.Fatal("no pmu_events")
	}
	for _, dp := range events.GetSum().DataPoints {
		if attrs(dp.Attributes)["event"] == "CPU_CLK_UNHALTED.THREAD" && dp.GetAsDouble() != 1500 {
			t.Errorf("CPU_CLK_UNHALTED.THREAD %v, want 1500", dp.GetAsDouble())
		}
	}
	if info := metrics["pmu_info"]; info == nil || info.GetGauge() == nil || attrs(info.GetGauge().DataPoints[0].Attributes)["source"] != "replay" {
		t.Errorf("pmu_info: %v", info)
	}
}

func start(t *testing.T, endpoint, protocol string) {
	t.Helper()
	p, err := Start(context.Background(), registry(t), Options{Endpoint: endpoint, Protocol: protocol,
		Interval: 100 * time.Millisecond, HostName: "node-a", NodeName: "node-a", Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
}

func TestPushHTTP(t *testing.T) {
	r := newReceiver()
	srv := httptest.NewServer(r)
	defer srv.Close()
	start(t, srv.URL, "http/protobuf")
	check(t, r.first(t))
}

func TestPushGRPC(t *testing.T) {
	r := newReceiver()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	colmetricpb.RegisterMetricsServiceServer(srv, r)
	go srv.Serve(l)
	defer srv.Stop()
	start(t, "http://"+l.Addr().String(), "grpc")
	check(t, r.first(t))
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{Endpoint: "collector:4318"}, {Endpoint: "http://c:4318", Protocol: "thrift"}} {
		if _, err := Start(context.Background(), prometheus.NewRegistry(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// The load latency, a native histogram, goes out as an OTLP exponential
// histogram of the same scale, count and sum; the sampling counters lose
// _total like the others.
func TestNativeHistogramToExponential(t *testing.T) {
	stats := samplestat.New(1, 16)
	src := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL2, LvlNum: datasrc.LvlNumL2}.Encode()
	b := stats.Lock()
	for _, w := range []uint64{40, 41, 300} {
		b.Sample(0, &perfrecord.Sample{Has: unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_DATA_SRC, Addr: 0x40, Period: 100, DataSrc: src, Weight: w}, true, false)
	}
	b.Unlock()
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.NewSampling(exporter.FixedPeriods{{Name: "mem-loads", PMU: "cpu", Period: 100, Memory: true}}, stats))
	scopes, err := Producer{promBridge.NewMetricProducer(promBridge.WithGatherer(reg))}.Produce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]metricdata.Aggregation{}
	for _, sc := range scopes {
		for _, m := range sc.Metrics {
			names[m.Name] = m.Data
		}
	}
	h, ok := names["pmu_mem_load_latency_cycles"].(metricdata.ExponentialHistogram[float64])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("latency: %T %v (metrics %v)", names["pmu_mem_load_latency_cycles"], names["pmu_mem_load_latency_cycles"], keys(names))
	}
	if dp := h.DataPoints[0]; dp.Scale != samplestat.Schema || dp.Count != 3 || dp.Sum != 381 {
		t.Errorf("latency data point: scale %d count %d sum %v", dp.Scale, dp.Count, dp.Sum)
	}
	if _, ok := names["pmu_mem_samples"]; !ok {
		t.Errorf("pmu_mem_samples_total did not lose _total: %v", keys(names))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
