package exporter

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/topdown"
)

// TopdownSource is what the Top-Down collector reads: topdown.Live.
type TopdownSource interface {
	Totals() (slots float64, nodes []topdown.Node, violations map[string]uint64)
	TotalsPerCPU() (slots map[int]float64, nodes map[int][]topdown.Node, violations map[string]uint64)
}

// TopdownInfo labels pmu_topdown_info.
type TopdownInfo struct {
	Uarch, Source, SMT string
}

// TopdownCollector exports Top-Down as additive slot counters: each node's
// fraction times the interval's slots, accumulated, and the slots themselves, so
// that rate(pmu_topdown_slots_total) / rate(pmu_slots_total) is the fraction over
// any window and any aggregation. No ratio is exported as a gauge.
type TopdownCollector struct {
	src                                TopdownSource
	info                               TopdownInfo
	perCPU                             bool
	slots, nodeSlots, infoD, violation *prometheus.Desc
}

// NewTopdown builds the collector; perCPU adds a cpu label to the slot counters.
func NewTopdown(src TopdownSource, info TopdownInfo, perCPU bool) *TopdownCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	cpu := func(labels ...string) []string {
		if perCPU {
			return append(labels, "cpu")
		}
		return labels
	}
	return &TopdownCollector{src: src, info: info, perCPU: perCPU,
		slots:     d("slots_total", "Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.", cpu()...),
		nodeSlots: d("topdown_slots_total", "Slots attributed to a Top-Down node: its fraction times the interval's slots, accumulated over intervals and CPUs.", cpu("level", "category", "parent")...),
		infoD:     d("topdown_info", "The Top-Down tree in use, always 1.", "uarch", "source", "smt"),
		violation: d("topdown_containment_violations_total", "Intervals, summed over CPUs, in which a node's children did not add up to it; never clamped away.", "parent"),
	}
}

// Describe sends the descriptors.
func (c *TopdownCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.slots
	ch <- c.nodeSlots
	ch <- c.infoD
	ch <- c.violation
}

// Collect sends the accumulated slots.
func (c *TopdownCollector) Collect(ch chan<- prometheus.Metric) {
	var slots map[int]float64
	var nodes map[int][]topdown.Node
	var violations map[string]uint64
	if c.perCPU {
		slots, nodes, violations = c.src.TotalsPerCPU()
	} else {
		var all float64
		var summed []topdown.Node
		all, summed, violations = c.src.Totals()
		slots, nodes = map[int]float64{-1: all}, map[int][]topdown.Node{-1: summed}
	}
	parents := map[string]bool{}
	for cpu, s := range slots {
		labels := func(l ...string) []string {
			if c.perCPU {
				return append(l, strconv.Itoa(cpu))
			}
			return l
		}
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.CounterValue, s, labels()...)
		for _, n := range nodes[cpu] {
			ch <- prometheus.MustNewConstMetric(c.nodeSlots, prometheus.CounterValue, n.Slots, labels(strconv.Itoa(n.Level), n.Name, n.Parent)...)
			if n.Parent != "" {
				parents[n.Parent] = true
			}
		}
	}
	for p := range parents {
		ch <- prometheus.MustNewConstMetric(c.violation, prometheus.CounterValue, float64(violations[p]), p)
	}
	ch <- prometheus.MustNewConstMetric(c.infoD, prometheus.GaugeValue, 1, c.info.Uarch, c.info.Source, c.info.SMT)
}
