package exporter

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
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
	// The samplers' verdicts (WithSamplers; issue 61).
	samplers                               func() []sampler.Row
	samplerRatio, samplerPassed, validated *prometheus.Desc
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
		samplers: func() []sampler.Row { return nil },
		samplerRatio: desc("sampler_validation_ratio",
			"A sampler's figure on the sampling loops, whose events, instructions and addresses are known (docs/trust.md): accuracy (samples caught over those the events and the period imply), stability (its standard error over runs), bias (distance of the samples' shares over the instructions from the events'), attribution (share on the triggering instruction), address (share of data addresses right), mode_leak (share in the excluded mode), loss (share of records lost); by period (events, or ns for a clock) where the figure is per period.", "sampler", "figure", "period"),
		samplerPassed: desc("sampler_validation_passed",
			"1 if the sampler's figure kept its bound, 0 if not; absent where it could not be measured.", "sampler", "figure", "period"),
		validated: desc("sampler_validated",
			"1 if every figure of the sampler that could be measured kept its bound, 0 if one did not: the false-sharing, data-source and reuse figures that rest on a sampler at 0 are not to be trusted.", "sampler"),
	}
}

// WithSamplers exports the samplers' verdicts as well, as they become
// available.
func (c *ValidationCollector) WithSamplers(rows func() []sampler.Row) *ValidationCollector {
	c.samplers = rows
	return c
}

// Describe implements prometheus.Collector.
func (c *ValidationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.goodness
	ch <- c.passed
	ch <- c.muxError
	ch <- c.samplerRatio
	ch <- c.samplerPassed
	ch <- c.validated
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
	c.collectSamplers(ch)
}

// collectSamplers exports each measured figure and whether it passed, and
// each sampler's verdict over its figures.
func (c *ValidationCollector) collectSamplers(ch chan<- prometheus.Metric) {
	bySampler := map[string][]sampler.Row{}
	var order []string
	for _, r := range c.samplers() {
		if bySampler[r.Sampler] == nil {
			order = append(order, r.Sampler)
		}
		bySampler[r.Sampler] = append(bySampler[r.Sampler], r)
		if r.Verdict == validate.NotMeasurable {
			continue
		}
		period := ""
		if r.Period != 0 {
			period = strconv.FormatUint(r.Period, 10)
		}
		ch <- prometheus.MustNewConstMetric(c.samplerRatio, prometheus.GaugeValue, r.Value, r.Sampler, r.Figure, period)
		ch <- prometheus.MustNewConstMetric(c.samplerPassed, prometheus.GaugeValue, boolValue(r.Verdict == validate.Pass), r.Sampler, r.Figure, period)
	}
	for _, name := range order {
		if passed, measured := sampler.Passed(bySampler[name]); measured {
			ch <- prometheus.MustNewConstMetric(c.validated, prometheus.GaugeValue, boolValue(passed), name)
		}
	}
}
