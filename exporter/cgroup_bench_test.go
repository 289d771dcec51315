package exporter

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// cpuTime is this process's CPU time so far, in ns.
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

type manyCgroups struct{ s model.CgroupSnapshot }

func (f manyCgroups) Snapshot() model.CgroupSnapshot { return f.s }

// cgroupSnapshot is n pod containers with the default profile's eight
// software events and a level 1 and 2 Top-Down tree (4 + 8 nodes), as a
// node with per-cgroup Top-Down exports them.
func cgroupSnapshot(n int) model.CgroupSnapshot {
	events := []string{"cgroup-switches", "context-switches", "cpu-clock", "cpu-migrations", "major-faults", "minor-faults", "page-faults", "task-clock"}
	var nodes []topdown.Node
	for _, l1 := range []string{"frontend_bound", "bad_speculation", "backend_bound", "retiring"} {
		nodes = append(nodes, topdown.Node{Name: l1, Level: 1, Slots: 1e9})
		for _, l2 := range []string{"a", "b"} {
			nodes = append(nodes, topdown.Node{Name: l1 + "_" + l2, Level: 2, Parent: l1, Slots: 5e8})
		}
	}
	s := model.CgroupSnapshot{Errors: map[string]uint64{}, TopDown: true}
	for i := range n {
		pod := fmt.Sprintf("4f1c2d3e-5a6b-4c7d-8e9f-%012d", i/2)
		ctr := fmt.Sprintf("%064d", i)
		cg := model.Cgroup{Path: "/kubepods/burstable/pod" + pod + "/" + ctr,
			Identity: podcgroup.Identity{PodUID: pod, ContainerID: ctr}, Slots: 4e9, Nodes: nodes, HasSlots: true}
		for j, e := range events {
			cg.Events = append(cg.Events, model.Count{Event: e, Value: float64(i*100 + j)})
		}
		s.Cgroups = append(s.Cgroups, cg)
	}
	return s
}

// BenchmarkCgroupScrape is a whole scrape of the per-cgroup series through
// the real handler (gather, sort, text encoding, and gzip as Prometheus asks
// for it), with and without per-cgroup Top-Down, by CgroupCollector and, side
// by side, by the same series built as constant metrics at each scrape (as
// node_exporter's collectors build theirs, and this collector did before):
// go test -run '^$' -bench CgroupScrape -benchmem -benchtime 20x ./exporter/
func BenchmarkCgroupScrape(b *testing.B) {
	for _, topdown := range []bool{false, true} {
		for _, n := range []int{100, 1000, 5000} {
			s := cgroupSnapshot(n)
			if !topdown { // a node without a PMU, as this project's VMs
				for i := range s.Cgroups {
					s.Cgroups[i].HasSlots, s.Cgroups[i].Nodes = false, nil
				}
			}
			for _, c := range []struct {
				name string
				c    prometheus.Collector
			}{
				{"cached", NewCgroup(manyCgroups{s}, nil, AttributedByBPF)},
				{"const", constCgroups{NewCgroup(manyCgroups{s}, nil, AttributedByBPF), s}},
			} {
				b.Run(fmt.Sprintf("topdown=%v/cgroups=%d/collector=%s", topdown, n, c.name), func(b *testing.B) {
					scrape(b, c.c)
				})
			}
		}
	}
}

// constCgroups exports the per-cgroup series of a snapshot with a constant
// metric per series and scrape: the peer of CgroupCollector's cache.
type constCgroups struct {
	c *CgroupCollector
	s model.CgroupSnapshot
}

func (k constCgroups) Describe(ch chan<- *prometheus.Desc) { k.c.Describe(ch) }

func (k constCgroups) Collect(ch chan<- prometheus.Metric) {
	for _, cg := range k.s.Cgroups {
		id := k.c.identity(cg)
		l := id[:]
		for _, e := range cg.Events {
			ch <- prometheus.MustNewConstMetric(k.c.events, prometheus.CounterValue, e.Value, append(l, e.Event)...)
		}
		if !cg.HasSlots {
			continue
		}
		ch <- prometheus.MustNewConstMetric(k.c.slots, prometheus.CounterValue, cg.Slots, l...)
		for _, n := range cg.Nodes {
			ch <- prometheus.MustNewConstMetric(k.c.nodeSlots, prometheus.CounterValue, n.Slots, append(l, strconv.Itoa(n.Level), n.Name, n.Parent)...)
		}
	}
}

// discard is the scrape's client: it keeps the byte count and nothing else,
// so the benchmark measures the handler, not a growing recorder buffer.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

func scrape(b *testing.B, c prometheus.Collector) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	h, err := Handler(reg, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, enc := range []string{"identity", "gzip"} {
		b.Run("encoding="+enc, func(b *testing.B) {
			// What Prometheus sends: it asks for gzip.
			req := httptest.NewRequest("GET", "/metrics", nil)
			req.Header.Set("Accept-Encoding", enc)
			b.ReportAllocs()
			var size int
			cpu0 := cpuTime(b)
			for b.Loop() {
				w := &discard{h: http.Header{}}
				h.ServeHTTP(w, req)
				size = w.n
			}
			// CPU time rather than wall time: what a scrape costs the node,
			// and steady on a busy machine.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}

// BenchmarkCompression compresses the 1,000-cgroup exposition with Top-Down
// (7.2 MB) as promhttp does (compress/gzip, default level) and as Handler
// does (klauspost's gzip at its fastest level), beside compress/gzip at its
// fastest, reporting the compressed size.
func BenchmarkCompression(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCgroup(manyCgroups{cgroupSnapshot(1000)}, nil, AttributedByBPF))
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var text bytes.Buffer
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&text, mf)
	}
	for _, c := range []struct {
		name string
		new  func(io.Writer) io.WriteCloser
	}{
		{"promhttp(compress/gzip,default)", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
		{"compress/gzip,fastest", func(w io.Writer) io.WriteCloser { z, _ := gzip.NewWriterLevel(w, gzip.BestSpeed); return z }},
		{"Handler(klauspost,fastest)", func(w io.Writer) io.WriteCloser { z, _ := kgzip.NewWriterLevel(w, kgzip.BestSpeed); return z }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var out bytes.Buffer
			for b.Loop() {
				out.Reset()
				z := c.new(&out)
				z.Write(text.Bytes())
				z.Close()
			}
			b.ReportMetric(float64(out.Len()), "bytes")
		})
	}
}
