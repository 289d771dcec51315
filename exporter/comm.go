package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
)

// CommSource is the address sampler's state: ComDetective's detector and
// the decoder's outcome counts, held still while f runs.
type CommSource interface {
	View(f func(det *comdetect.Detector, unresolved [memop.NumReasons]uint64, resolved [2]uint64))
}

// CommCollector exports communication between threads, node-wide, and what
// the address sampler could and could not resolve.
type CommCollector struct {
	src                          CommSource
	outcomes, detections, volume *prometheus.Desc
	window                       *prometheus.Desc
}

// NewComm exports src.
func NewComm(src CommSource) *CommCollector {
	return &CommCollector{src: src,
		outcomes: prometheus.NewDesc("pmu_address_samples_total",
			"Timer samples of the address sampler by outcome: resolved from the instruction at the sampled IP (at_ip) or the one before it (before_ip), or why no address (no_memory_operand, segment_relative, gather, string_instruction, undecodable, unreadable_code, kernel, jit, no_registers).",
			[]string{"outcome"}, nil),
		detections: prometheus.NewDesc("pmu_comm_detections_total",
			"ComDetective detections: a sampled access of one thread to a cache line another thread's sampled store published, by kind (true_sharing: overlapping bytes; false_sharing: not). Raw counts behind pmu_comm_volume_total.",
			[]string{"kind"}, nil),
		volume: prometheus.NewDesc("pmu_comm_volume_total",
			"Communication between threads estimated from the detections, by kind: the sum of the detecting samples' periods (the address sampler's: nanoseconds of sampled CPU time, so a share of time, not of accesses).",
			[]string{"kind"}, nil),
		window: prometheus.NewDesc("pmu_comm_window_samples",
			"How many of a reader's own samples a published store stays fresh for.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *CommCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.outcomes
	ch <- c.detections
	ch <- c.volume
	ch <- c.window
}

// Collect implements prometheus.Collector.
func (c *CommCollector) Collect(ch chan<- prometheus.Metric) {
	c.src.View(func(det *comdetect.Detector, unresolved [memop.NumReasons]uint64, resolved [2]uint64) {
		ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(resolved[0]), "at_ip")
		ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(resolved[1]), "before_ip")
		for r, n := range unresolved {
			if memop.Reason(r) != memop.Resolved {
				ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(n), memop.Reason(r).String())
			}
		}
		t := det.Totals()
		ch <- prometheus.MustNewConstMetric(c.detections, prometheus.CounterValue, float64(t.TrueCount), "true_sharing")
		ch <- prometheus.MustNewConstMetric(c.detections, prometheus.CounterValue, float64(t.FalseCount), "false_sharing")
		ch <- prometheus.MustNewConstMetric(c.volume, prometheus.CounterValue, float64(t.True), "true_sharing")
		ch <- prometheus.MustNewConstMetric(c.volume, prometheus.CounterValue, float64(t.False), "false_sharing")
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(det.Window()))
	})
}
