package exporter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Health holds each collector's latest cycle: whether it succeeded and how
// long it took, exported as node_exporter exports its collectors' scrapes
// (pmu_collector_success, pmu_collector_duration_seconds).
type Health struct {
	success, duration *prometheus.Desc
	mu                sync.Mutex
	last              map[string]result
	names             []string
}

type result struct {
	seconds float64
	ok      bool
}

// NewHealth reports on the named collectors, those the pipeline runs (an
// enabled collector that could not start is among them: it reports 0): each
// is 0 (failed, or not run yet) until its first cycle succeeds.
func NewHealth(names ...string) *Health {
	h := &Health{last: map[string]result{}, names: names,
		success:  desc("collector_success", "Whether the collector's latest cycle succeeded (1) or failed or has not run yet (0).", "collector"),
		duration: desc("collector_duration_seconds", "How long the collector's latest cycle took.", "collector"),
	}
	for _, n := range names {
		h.last[n] = result{}
	}
	return h
}

// Observe records a cycle of the named collector.
func (h *Health) Observe(name string, d time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.last[name]; ok {
		h.last[name] = result{d.Seconds(), err == nil}
	}
}

// Time runs one cycle of the named collector and records it.
func (h *Health) Time(name string, cycle func() error) {
	start := time.Now()
	err := cycle()
	h.Observe(name, time.Since(start), err)
}

// Describe sends the descriptors.
func (h *Health) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.success
	ch <- h.duration
}

// Collect sends every enabled collector's latest cycle.
func (h *Health) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.names {
		r := h.last[n]
		ok := 0.0
		if r.ok {
			ok = 1
		}
		ch <- prometheus.MustNewConstMetric(h.success, prometheus.GaugeValue, ok, n)
		ch <- prometheus.MustNewConstMetric(h.duration, prometheus.GaugeValue, r.seconds, n)
	}
}
