package exporter

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Health holds each collector's latest cycle: whether it succeeded and how
// long it took, exported as node_exporter exports its collectors' scrapes
// (pmu_collector_success, pmu_collector_duration_seconds).
type Health struct {
	success, duration, available *prometheus.Desc
	// unavailable are the enabled collectors this host cannot run (no
	// success or duration: they do not fail).
	unavailable []string
	mu          sync.Mutex
	last        map[string]result
	names       []string
	// running are the cycles begun and not ended, by ticket: a cycle
	// that never ends (a read that hangs) is what Stuck finds.
	running map[uint64]started
	ticket  uint64
}

// started is a running cycle: its collector and when it began.
type started struct {
	name string
	at   time.Time
}

type result struct {
	seconds float64
	ok      bool
}

// NewHealth reports on the named collectors, those the pipeline runs (an
// enabled collector that could not start is among them: it reports 0): each
// is 0 (failed, or not run yet) until its first cycle succeeds.
func NewHealth(names ...string) *Health {
	h := &Health{last: map[string]result{}, names: names, running: map[uint64]started{},
		success:   desc("collector_success", "Whether the collector's latest cycle succeeded (1) or failed or has not run yet (0).", "collector"),
		duration:  desc("collector_duration_seconds", "How long the collector's latest cycle took.", "collector"),
		available: desc("collector_available", "Whether the enabled collector can run on this host (1), or not, for a reason pmu_exporter check names (0: no Top-Down tree for this CPU, no precise sampler, no platform PMU; in replay, nothing recorded for it). pmu_collector_success and pmu_collector_duration_seconds cover the available ones only: a collector that cannot run here has not failed.", "collector"),
	}
	for _, n := range names {
		h.last[n] = result{}
	}
	return h
}

// SetUnavailable names the enabled collectors this host cannot run.
func (h *Health) SetUnavailable(names ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unavailable = append(h.unavailable, names...)
}

// Observe records a cycle of the named collector.
func (h *Health) Observe(name string, d time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.last[name]; ok {
		h.last[name] = result{d.Seconds(), err == nil}
	}
}

// Begin marks a cycle of the named collector begun; end marks it ended
// (its outcome is Observe's). Until then the cycle is running, and Stuck
// names it once it has run too long.
func (h *Health) Begin(name string) (end func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ticket++
	ticket := h.ticket
	h.running[ticket] = started{name, time.Now()}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.running, ticket)
	}
}

// Stuck names the collectors with a cycle begun more than bound before
// now and not ended, in order, with how long the oldest has run: a read
// hung in the kernel (a file on a stalled FUSE or NFS mount), a lock
// never released. A collector that is idle, with no cycle running, is
// never stuck.
func (h *Health) Stuck(now time.Time, bound time.Duration) map[string]time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[string]time.Duration
	for _, c := range h.running {
		if ran := now.Sub(c.at); ran > bound && ran > out[c.name] {
			if out == nil {
				out = map[string]time.Duration{}
			}
			out[c.name] = ran
		}
	}
	return out
}

// StuckText says which collectors are stuck and for how long, sorted,
// for /-/healthy's body and the log ("" when none).
func StuckText(stuck map[string]time.Duration) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(stuck)) {
		parts = append(parts, n+" for "+stuck[n].Round(time.Millisecond).String())
	}
	return strings.Join(parts, ", ")
}

// Time runs one cycle of the named collector and records it.
func (h *Health) Time(name string, cycle func() error) {
	end := h.Begin(name)
	start := time.Now()
	err := cycle()
	end()
	h.Observe(name, time.Since(start), err)
}

// Describe sends the descriptors.
func (h *Health) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.success
	ch <- h.duration
	ch <- h.available
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
		ch <- prometheus.MustNewConstMetric(h.available, prometheus.GaugeValue, 1, n)
	}
	for _, n := range h.unavailable {
		ch <- prometheus.MustNewConstMetric(h.available, prometheus.GaugeValue, 0, n)
	}
}
