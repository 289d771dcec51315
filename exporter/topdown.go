package exporter

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
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

// TopdownTree is one tree and where its slot counters come from. A hybrid host
// runs one per core type, on disjoint CPUs.
type TopdownTree struct {
	Src  TopdownSource
	Info TopdownInfo
}

// TopdownCollector exports Top-Down as additive slot counters: each node's
// fraction times the interval's slots, accumulated, and the slots themselves, so
// that rate(pmu_topdown_slots_total) / rate(pmu_slots_total) is the fraction over
// any window and any aggregation. No ratio is exported as a gauge. The trees'
// counters are summed: a node's slots on P-cores and E-cores add up, and the
// ratio of the sums is the slot-weighted fraction over the whole host.
type TopdownCollector struct {
	trees                              []TopdownTree
	perCPU                             bool
	slots, nodeSlots, infoD, violation *prometheus.Desc
	notComputed                        *prometheus.Desc
}

// notComputedSource is a TopdownSource that also says which values it left
// out (topdown.Live does).
type notComputedSource interface {
	NotComputed() map[topdown.NotComputed]uint64
}

// NewTopdown builds the collector; perCPU adds a cpu label to the slot counters.
func NewTopdown(trees []TopdownTree, perCPU bool) *TopdownCollector {
	cpu := func(labels ...string) []string {
		if perCPU {
			return append(labels, "cpu")
		}
		return labels
	}
	return &TopdownCollector{trees: trees, perCPU: perCPU,
		slots:     desc("slots_total", "Pipeline slots (issue or dispatch) over which Top-Down was computed, summed over CPUs.", cpu()...),
		nodeSlots: desc("topdown_slots_total", "Slots attributed to a Top-Down node: its fraction times the interval's slots, accumulated over intervals and CPUs.", cpu("level", "category", "parent")...),
		infoD:     desc("topdown_info", "The Top-Down tree in use (one per core type on hybrid hosts), always 1.", "uarch", "source", "smt"),
		violation: desc("topdown_containment_violations_total", "Intervals, summed over CPUs, in which a node's children did not add up to it; never clamped away. Not for a node whose children are separate estimates (Intel's levels 3 and deeper), which need not add up.", "parent"),
		notComputed: desc("topdown_not_computed_intervals_total", "Intervals, summed over CPUs, whose value of a node was left out of its counter: negative (a counter never goes down) or a division by zero with every input counted.",
			"category", "reason"),
	}
}

// Describe sends the descriptors.
func (c *TopdownCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.slots
	ch <- c.nodeSlots
	ch <- c.infoD
	ch <- c.violation
	ch <- c.notComputed
}

// nodeKey is one pmu_topdown_slots_total series; cpu is -1 when not per CPU.
type nodeKey struct {
	cpu, level   int
	name, parent string
}

// Collect sends the accumulated slots, summed over trees.
func (c *TopdownCollector) Collect(ch chan<- prometheus.Metric) {
	slots := map[int]float64{}
	nodes := map[nodeKey]float64{}
	violations := map[string]uint64{}
	infos := map[TopdownInfo]bool{}
	for _, t := range c.trees {
		infos[t.Info] = true
		var perCPU map[int]float64
		var byCPU map[int][]topdown.Node
		var v map[string]uint64
		if c.perCPU {
			perCPU, byCPU, v = t.Src.TotalsPerCPU()
		} else {
			var all float64
			var summed []topdown.Node
			all, summed, v = t.Src.Totals()
			perCPU, byCPU = map[int]float64{-1: all}, map[int][]topdown.Node{-1: summed}
		}
		parents, estimated := map[string]bool{}, map[string]bool{}
		for cpu, s := range perCPU {
			slots[cpu] += s
			for _, n := range byCPU[cpu] {
				nodes[nodeKey{cpu, n.Level, n.Name, n.Parent}] += n.Slots
				if n.Parent != "" {
					parents[n.Parent] = true
				}
				estimated[n.Name] = n.ChildrenEstimated
			}
		}
		for p := range parents { // every parent gets a series, even at 0
			if !estimated[p] { // but those whose children are not held to them
				violations[p] += v[p]
			}
		}
	}
	cpuLabel := func(cpu int, l ...string) []string {
		if c.perCPU {
			return append(l, strconv.Itoa(cpu))
		}
		return l
	}
	for cpu, s := range slots {
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.CounterValue, s, cpuLabel(cpu)...)
	}
	for k, s := range nodes {
		ch <- prometheus.MustNewConstMetric(c.nodeSlots, prometheus.CounterValue, s, cpuLabel(k.cpu, strconv.Itoa(k.level), k.name, k.parent)...)
	}
	skipped := map[topdown.NotComputed]uint64{}
	for _, t := range c.trees {
		if s, ok := t.Src.(notComputedSource); ok {
			for k, n := range s.NotComputed() {
				skipped[k] += n
			}
		}
	}
	for k, n := range skipped {
		ch <- prometheus.MustNewConstMetric(c.notComputed, prometheus.CounterValue, float64(n), k.Node, k.Reason)
	}
	for p, n := range violations {
		ch <- prometheus.MustNewConstMetric(c.violation, prometheus.CounterValue, float64(n), p)
	}
	for i := range infos {
		ch <- prometheus.MustNewConstMetric(c.infoD, prometheus.GaugeValue, 1, i.Uarch, i.Source, i.SMT)
	}
}
