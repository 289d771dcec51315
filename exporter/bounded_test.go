package exporter

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gated is a collector whose Collect sends its value, then waits until
// the gate is open (a source whose lock a hung read holds).
type gated struct {
	desc    *prometheus.Desc
	value   atomic.Int64
	gate    chan struct{}
	entered atomic.Int32
}

func (g *gated) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *gated) Collect(ch chan<- prometheus.Metric) {
	g.entered.Add(1)
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.CounterValue, float64(g.value.Load()))
	<-g.gate
}

// TestBoundedServesLastWhileStuck: a collector that completes is served
// fresh; one that hangs is served its last complete values within the
// bound, each such scrape counted, one Collect running at most however
// many scrapes come; once it is free again, fresh values return.
func TestBoundedServesLastWhileStuck(t *testing.T) {
	g := &gated{desc: prometheus.NewDesc("x_total", "x", nil, nil), gate: make(chan struct{})}
	close(g.gate)
	stale := NewStaleScrapes()
	b := NewBounded(g, "comm", 50*time.Millisecond, stale)
	reg := prometheus.NewRegistry()
	reg.MustRegister(b, stale)
	g.value.Store(7)
	want := func(x string) {
		t.Helper()
		exp := "# HELP x_total x\n# TYPE x_total counter\n" + x
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "x_total"); err != nil {
			t.Error(err)
		}
	}
	want("x_total 7\n")
	if got := testutil.ToFloat64(stale); got != 0 {
		t.Errorf("pmu_scrape_stale_total = %v after a scrape within the bound, want 0", got)
	}

	g.gate = make(chan struct{}) // the source hangs from now on
	g.value.Store(9)
	start := time.Now()
	for range 5 {
		want("x_total 7\n")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("5 scrapes of a stuck collector took %v; each is bounded by 50 ms", took)
	}
	if n := g.entered.Load(); n != 2 {
		t.Errorf("Collect entered %d times; want 2 (one complete, one stuck for all 5 scrapes)", n)
	}
	if got := testutil.ToFloat64(stale); got != 5 {
		t.Errorf("pmu_scrape_stale_total = %v after 5 stuck scrapes, want 5", got)
	}
	// Counted by their stacks, not runtime.NumGoroutine: the registry's
	// own workers come and go around a Gather, the race detector's too.
	if n := boundedGoroutines(); n != 2 {
		t.Errorf("%d goroutines in Bounded.collect after 5 stuck scrapes; want 2: the one stuck Collect's and its drain", n)
	}
	close(g.gate) // free: the stuck Collect ends, the next is fresh
	deadline := time.Now().Add(2 * time.Second)
	for g.entered.Load() < 3 && time.Now().Before(deadline) {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	want("x_total 9\n")
}

// boundedGoroutines is how many goroutines run Bounded.collect or its
// drain, from every goroutine's stack.
func boundedGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "exporter.(*Bounded).collect") {
			n++
		}
	}
	return n
}

// many is a collector of n constant series, as a large exporter part.
type many struct {
	desc *prometheus.Desc
	n    int
}

func (m many) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

func (m many) Collect(ch chan<- prometheus.Metric) {
	for i := range m.n {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(i), strconv.Itoa(i))
	}
}

// What the bound adds to gathering a part of 1,000 series: its Collect's
// goroutine and the copy of the series it keeps.
func BenchmarkBoundedGather(b *testing.B) {
	part := many{prometheus.NewDesc("x_total", "x", []string{"i"}, nil), 1000}
	for _, c := range []struct {
		name string
		c    prometheus.Collector
	}{{"direct", part}, {"bounded", NewBounded(part, "x", time.Second, NewStaleScrapes())}} {
		b.Run(c.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(c.c)
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
