package exporter

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupcount"
	"github.com/pmu-exporter/pmu_exporter/podcgroup"
)

// CgroupSource is what the cgroup collector reads: the attributor.
type CgroupSource interface {
	Snapshot() cgroupcount.Snapshot
}

// PodNames turns the identity in a cgroup path into Kubernetes names (from
// the API server); without it, pod and container carry the UID and ID.
type PodNames interface {
	Names(id podcgroup.Identity) (namespace, pod, container string, ok bool)
}

// CgroupCollector exports per-cgroup counts with the node families'
// semantics: scaled event counters, Top-Down slot counters and slots, so the
// node's recording rules work per pod (filter container!="" for containers
// alone: a pod's own cgroup holds the sum of its containers, as in cAdvisor).
type CgroupCollector struct {
	src                                   CgroupSource
	names                                 PodNames
	events, slots, nodeSlots              *prometheus.Desc
	unattributed, missed, errors, tracked *prometheus.Desc
	perfModeFDs                           *prometheus.Desc
	perfMode                              bool
}

// NewCgroup builds the collector; names may be nil. perfMode says the source
// is perf's cgroup mode (the fallback without eBPF), whose fd cost is exported.
func NewCgroup(src CgroupSource, names PodNames, perfMode bool) *CgroupCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	id := []string{"cgroup", "namespace", "pod", "container"}
	with := func(l ...string) []string { return append(append([]string(nil), id...), l...) }
	return &CgroupCollector{src: src, names: names, perfMode: perfMode,
		perfModeFDs: d("cgroup_perf_mode_fds", "File descriptors held by perf's cgroup mode (one per event per CPU per allow-listed cgroup), the fallback when eBPF is not permitted."),
		events: d("cgroup_events_total", "Event counts attributed to a cgroup (and to its ancestors) in the kernel at each cgroup switch, scaled for multiplexing per interval, summed over CPUs. cgroup=\"other\" holds the cgroups beyond --cgroup.max-series.",
			with("event")...),
		slots: d("cgroup_slots_total", "Pipeline slots of the cgroup over which Top-Down was computed, summed over CPUs.", id...),
		nodeSlots: d("cgroup_topdown_slots_total", "Slots of the cgroup attributed to a Top-Down node: its fraction of each interval's slots, accumulated.",
			with("level", "category", "parent")...),
		unattributed: d("cgroup_unattributed_events_total", "Event counts of spans the kernel did not run the attribution program for at a cgroup switch, so that no one cgroup owns them.", "event"),
		missed:       d("cgroup_switches_missed_total", "Cgroup switches the kernel counted but did not run the attribution program for; their spans are in pmu_cgroup_unattributed_events_total."),
		errors:       d("cgroup_attribution_errors_total", "Failures in the per-cgroup attribution, by reason (map_full: credits lost because --cgroup.max-tracked was reached).", "reason"),
		tracked:      d("cgroup_tracked", "Cgroups held in the kernel's attribution map."),
	}
}

// Describe sends the descriptors.
func (c *CgroupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.slots, c.nodeSlots, c.unattributed, c.missed, c.errors, c.tracked, c.perfModeFDs} {
		ch <- d
	}
}

// Collect sends the latest cycle's values.
func (c *CgroupCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	for _, cg := range s.Cgroups {
		l := c.identity(cg)
		for _, e := range cg.Events {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, e.Value, append(l, e.Event)...)
		}
		if !cg.HasSlots {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.CounterValue, cg.Slots, l...)
		for _, n := range cg.Nodes {
			ch <- prometheus.MustNewConstMetric(c.nodeSlots, prometheus.CounterValue, n.Slots, append(l, strconv.Itoa(n.Level), n.Name, n.Parent)...)
		}
	}
	for _, e := range s.Unattributed {
		ch <- prometheus.MustNewConstMetric(c.unattributed, prometheus.CounterValue, e.Value, e.Event)
	}
	if c.perfMode {
		ch <- prometheus.MustNewConstMetric(c.perfModeFDs, prometheus.GaugeValue, float64(s.PerfModeFDs))
		ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(s.Tracked))
		return
	}
	ch <- prometheus.MustNewConstMetric(c.missed, prometheus.CounterValue, float64(s.Switches.SwitchesMissed))
	for _, r := range cgroupcount.ErrorReasons {
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(s.Errors[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(s.Tracked))
}

// identity is the cgroup, namespace, pod and container label values.
func (c *CgroupCollector) identity(cg cgroupcount.Cgroup) []string {
	id := cg.Identity
	if c.names != nil && id.PodUID != "" {
		if ns, pod, ctr, ok := c.names.Names(id); ok {
			return []string{cg.Path, ns, pod, ctr}
		}
	}
	return []string{cg.Path, "", id.PodUID, id.ContainerID}
}

// PodMetaSource is the Kubernetes pod index (podmeta.Index).
type PodMetaSource interface {
	Synced() bool
	WatchErrors() uint64
	Pods() int
}

// PodMetaCollector says whether pod names come through from the API server.
type PodMetaCollector struct {
	src                   PodMetaSource
	synced, errors, count *prometheus.Desc
}

// NewPodMeta builds the collector.
func NewPodMeta(src PodMetaSource) *PodMetaCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, nil, nil)
	}
	return &PodMetaCollector{src: src,
		synced: d("kubernetes_pods_synced", "Whether this node's pods have been listed from the Kubernetes API (1) or not yet (0: cgroup series carry pod UIDs and container IDs)."),
		errors: d("kubernetes_api_errors_total", "Failed lists and watches of this node's pods."),
		count:  d("kubernetes_pods", "Pods of this node known from the Kubernetes API."),
	}
}

// Describe sends the descriptors.
func (c *PodMetaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.synced
	ch <- c.errors
	ch <- c.count
}

// Collect sends the current values.
func (c *PodMetaCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.synced, prometheus.GaugeValue, boolValue(c.src.Synced()))
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(c.src.WatchErrors()))
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(c.src.Pods()))
}
