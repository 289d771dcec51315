package exporter

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
)

// ValidationCollector exports the validation kernels' verdicts (serve
// --validate.on-start): CAT's goodness per event and kernel, and whether
// each event passed; an event not measurable here has neither.
type ValidationCollector struct {
	results          func() []validate.Result // nil until the kernels ran
	goodness, passed *prometheus.Desc
	muxError         *prometheus.Desc
	mu               sync.Mutex
	mux              map[string]float64
}

// NewValidation exports results as they become available.
func NewValidation(results func() []validate.Result) *ValidationCollector {
	return &ValidationCollector{results: results, mux: map[string]float64{},
		muxError: desc("event_multiplex_error_ratio",
			"The relative error multiplexing gave the event: multiplexed copies scaled by enabled/running against a pinned copy over the same window, mean over the copies (needs a PMU; software events never multiplex).", "event"),
		goodness: desc("event_validation_goodness",
			"CAT's goodness exp(−2(β·r² − β_e)²) of the event's count over a validation loop's sizes (label kernel: the loop, CAT's kernel) against the count expected (1: exact; pass ≥ 0.9); kernel branch-signature: the seven branch loops together.", "event", "kernel"),
		passed: desc("event_validation_passed",
			"1 if the event counted what its validation loops expect, 0 if it did not (a mislabelled event, a broken virtual PMU); absent where it could not be measured.", "event"),
	}
}

// Describe implements prometheus.Collector.
func (c *ValidationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.goodness
	ch <- c.passed
	ch <- c.muxError
}

// SetMultiplexError records event's multiplexing error.
func (c *ValidationCollector) SetMultiplexError(event string, ratio float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mux[event] = ratio
}

// Collect implements prometheus.Collector.
func (c *ValidationCollector) Collect(ch chan<- prometheus.Metric) {
	passed := map[string]bool{}
	var order []string
	for _, r := range c.results() {
		if r.Verdict == validate.NotMeasurable {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.goodness, prometheus.GaugeValue, r.Goodness, r.Event, r.Loop)
		ok, seen := passed[r.Event]
		if !seen {
			order = append(order, r.Event)
			ok = true
		}
		passed[r.Event] = ok && r.Verdict == validate.Pass
	}
	c.mu.Lock()
	for ev, r := range c.mux {
		ch <- prometheus.MustNewConstMetric(c.muxError, prometheus.GaugeValue, r, ev)
	}
	c.mu.Unlock()
	for _, ev := range order {
		v := 0.0
		if passed[ev] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.passed, prometheus.GaugeValue, v, ev)
	}
}
