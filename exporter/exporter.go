// Package exporter turns what the counting loop accumulated, and the capability
// report, into Prometheus metrics. Collect copies the engine's snapshot and never
// makes a perf syscall. Everything additive is a counter (scaled event counts,
// enabled and running seconds) so that ratios — IPC, multiplexing, miss rates —
// are computed in PromQL after aggregation, not averaged here.
package exporter

import (
	"cmp"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/model"
)

const namespace = "pmu"

// ReadErrorReasons are the pmu_read_errors_total reasons, exported from zero.
var ReadErrorReasons = []string{"read", "online_cpus"}

// OpenFailureReasons are the reasons pmu_group_open_failures reports.
var OpenFailureReasons = []model.OpenReason{model.ReasonPermission, model.ReasonUnsupported, model.ReasonFDLimit,
	model.ReasonGroupDoesNotFit, model.ReasonBusy, model.ReasonNoDevice, model.ReasonInvalid}

// Source is what the collector reads: the counting engine.
type Source interface {
	Snapshot() model.Snapshot
}

// Options configure the collector.
type Options struct {
	// PerCPU adds a cpu label to event and group time series.
	PerCPU bool
	// ConfigErrors is the number of configuration problems found at start.
	ConfigErrors int
	// Source labels pmu_info: "perf_event" (live, the default) or "replay",
	// so that nobody mistakes played-back data for this host's.
	Source string
}

// Collector exports the engine's totals and the capability report.
type Collector struct {
	src    Source
	report capability.Report
	opts   Options

	events, enabled, running, notRunning *prometheus.Desc
	groupCPUs, openFailures              *prometheus.Desc
	capability, info, readErrors         *prometheus.Desc
	configErrors, reopened               *prometheus.Desc
}

// New builds the collector.
func New(src Source, report capability.Report, opts Options) *Collector {
	perCPU := func(labels ...string) []string {
		if opts.PerCPU {
			return append(labels, "cpu")
		}
		return labels
	}
	return &Collector{
		src: src, report: report, opts: opts,
		events: desc("events_total", "Event counts from perf_event_open, scaled for multiplexing (raw delta × Δtime_enabled/Δtime_running per interval) and summed over CPUs.",
			perCPU("event", "pmu")...),
		enabled: desc("group_enabled_seconds_total", "Time the event group was enabled, summed over CPUs; rate(running)/rate(enabled) is the share of time it held the counters.",
			perCPU("group")...),
		running: desc("group_running_seconds_total", "Time the event group was counting on the PMU, summed over CPUs.",
			perCPU("group")...),
		notRunning: desc("group_not_running_intervals_total", "Read intervals, summed over CPUs, in which the group never got the counters and so produced no value.",
			"group"),
		groupCPUs:    desc("group_cpus", "Number of CPUs on which the event group is open.", "group"),
		openFailures: desc("group_open_failures", "Number of CPUs on which the event group could not be opened, by reason; a reason that did not happen has no series.", "group", "reason"),
		capability:   desc("capability", "Whether this host offers a measurement feature (1) or not (0); `pmu_exporter check` says why and how to fix it.", "feature"),
		info: desc("info", "Processor identity and core PMU, and where the counts come from (source: perf_event, or replay of a recording), always 1.",
			"vendor", "family", "model", "stepping", "pmu_name", "hypervisor", "source"),
		readErrors:   desc("read_errors_total", "Failed reads in the counting loop, by reason.", "reason"),
		configErrors: desc("config_errors", "Number of problems in the event configuration at start; the affected groups are not counted.", nil...),
		reopened: desc("cpu_reopened_total", "Times the events of a CPU were found detached by the kernel (the CPU went offline and back between two reads) and reopened; counts of the lost span are not made up.",
			"cpu"),
	}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.enabled, c.running, c.notRunning, c.groupCPUs,
		c.openFailures, c.capability, c.info, c.readErrors, c.configErrors, c.reopened} {
		ch <- d
	}
}

// Collect sends the current values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	for _, e := range s.Events {
		if len(e.PerCPU) == 0 || e.Hidden {
			continue // never read (no value rather than a zero), or Top-Down input only
		}
		if c.opts.PerCPU {
			for _, cpu := range model.SortedCPUs(e.PerCPU) {
				ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(e.PerCPU[cpu]), e.Event, e.PMU, strconv.Itoa(cpu))
			}
		} else {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(e.Sum()), e.Event, e.PMU)
		}
	}
	for _, g := range s.Groups {
		c.groupTimes(ch, c.enabled, g.Name, g.EnabledNS)
		c.groupTimes(ch, c.running, g.Name, g.RunningNS)
		ch <- prometheus.MustNewConstMetric(c.notRunning, prometheus.CounterValue, float64(g.NotRunning), g.Name)
		ch <- prometheus.MustNewConstMetric(c.groupCPUs, prometheus.GaugeValue, float64(g.OpenCPUs), g.Name)
		// Only the reasons that happened: seven zeros per group on every
		// host would be a third of a replay's series (issue 57).
		for _, r := range OpenFailureReasons {
			if n := g.Failures[r]; n > 0 {
				ch <- prometheus.MustNewConstMetric(c.openFailures, prometheus.GaugeValue, float64(n), g.Name, string(r))
			}
		}
	}
	for _, f := range c.report.Features {
		ch <- prometheus.MustNewConstMetric(c.capability, prometheus.GaugeValue, boolValue(f.Available), f.Name)
	}
	r := c.report
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1,
		r.Vendor, r.Family, r.Model, r.Stepping, r.CorePMU, strconv.FormatBool(r.Hypervisor), cmp.Or(c.opts.Source, "perf_event"))
	for _, reason := range ReadErrorReasons {
		ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(s.ReadErrors[reason]), reason)
	}
	ch <- prometheus.MustNewConstMetric(c.configErrors, prometheus.GaugeValue, float64(c.opts.ConfigErrors))
	for _, cpu := range model.SortedCPUs(s.Reopened) {
		ch <- prometheus.MustNewConstMetric(c.reopened, prometheus.CounterValue, float64(s.Reopened[cpu]), strconv.Itoa(cpu))
	}
}

func (c *Collector) groupTimes(ch chan<- prometheus.Metric, d *prometheus.Desc, group string, ns map[int]uint64) {
	if c.opts.PerCPU {
		for _, cpu := range model.SortedCPUs(ns) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(ns[cpu])/1e9, group, strconv.Itoa(cpu))
		}
		return
	}
	var sum uint64
	for _, v := range ns {
		sum += v
	}
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(sum)/1e9, group)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// NewReadDurationHistogram is pmu_read_duration_seconds: the time of one read
// cycle over every group and CPU. Buckets span 10µs to ~0.3s.
func NewReadDurationHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "read_duration_seconds",
		Help:      "Duration of one read cycle of every event group on every CPU.",
		Buckets:   prometheus.ExponentialBuckets(10e-6, 2, 15),
	})
}

// desc builds every metric descriptor of the exporter, pmu_<name> as
// BuildFQName writes it: the one place a metric's name is made.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}
