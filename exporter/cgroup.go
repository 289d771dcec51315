package exporter

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// CgroupSource is what the cgroup collector reads: the attributor.
type CgroupSource interface {
	Snapshot() model.CgroupSnapshot
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
//
// A node exports tens of series per cgroup and thousands of cgroups, so the
// label pairs of each cgroup's series are built once and kept while the
// cgroup exists, and each family is sent in the registry's sort order (which
// makes its sort a linear check): constant metrics cost ~3× as much.
type CgroupCollector struct {
	src                                   CgroupSource
	names                                 PodNames
	events, slots, nodeSlots              *prometheus.Desc
	unattributed, missed, errors, tracked *prometheus.Desc
	perfModeFDs                           *prometheus.Desc
	runs, runTime, credits, timed         *prometheus.Desc // the programs' own cost
	attribution                           Attribution

	mu     sync.Mutex
	labels map[string]*cgroupLabels // by cgroup path
	scrape uint64                   // the current Collect's number, to drop cgroups gone
}

// cgroupLabels are one cgroup's label pairs, sorted by name as the text
// encoding wants them, for each of its series, by the series' position in
// the snapshot (which holds from one cycle to the next; a different name at a
// position rebuilds that entry).
type cgroupLabels struct {
	id     [4]string // cgroup, namespace, pod, container: a change rebuilds all
	events []eventLabels
	slots  []*dto.LabelPair
	nodes  []nodeLabels
	seen   uint64
}

type eventLabels struct {
	event string
	pairs []*dto.LabelPair
}

type nodeLabels struct {
	name, parent string
	level        int
	pairs        []*dto.LabelPair
}

// Attribution is how a CgroupSource came by its counts, which decides the
// families that describe the attribution itself.
type Attribution int

const (
	// AttributedByBPF: the eBPF program on this host; its missed switches,
	// errors and map occupancy are exported.
	AttributedByBPF Attribution = iota
	// PerfCgroupMode: perf's cgroup mode, the fallback without eBPF; its fd
	// cost and the cgroups it counts are exported.
	PerfCgroupMode
	// Recorded: counts from a recording (replay), which says nothing of this
	// host's attribution.
	Recorded
)

// NewCgroup builds the collector; names may be nil.
func NewCgroup(src CgroupSource, names PodNames, how Attribution) *CgroupCollector {
	return &CgroupCollector{src: src, names: names, attribution: how, labels: map[string]*cgroupLabels{},
		perfModeFDs: desc("cgroup_perf_mode_fds", "File descriptors held by perf's cgroup mode (one per event per CPU per allow-listed cgroup), the fallback when eBPF is not permitted."),
		events: desc("cgroup_events_total", "Event counts attributed to a cgroup (and to its ancestors) in the kernel at each cgroup switch, scaled for multiplexing per interval, summed over CPUs. cgroup=\"other\" holds the cgroups beyond --collector.cgroup.max-series; cgroup=\"gone\" those removed before the exporter read their path (a cgroup that lived less than --collector.counting.interval), whose counts are in their ancestors' series too.",
			append(identityLabels[:], "event")...),
		slots: desc("cgroup_slots_total", "Pipeline slots of the cgroup over which Top-Down was computed, summed over CPUs.", identityLabels[:]...),
		nodeSlots: desc("cgroup_topdown_slots_total", "Slots of the cgroup attributed to a Top-Down node: its fraction of each interval's slots, accumulated.",
			append(identityLabels[:], "level", "category", "parent")...),
		unattributed: desc("cgroup_unattributed_events_total", "Event counts of spans the kernel did not run the attribution program for at a cgroup switch, so that no one cgroup owns them.", "event"),
		missed:       desc("cgroup_switches_missed_total", "Cgroup switches the kernel counted but did not run the attribution program for; their spans are in pmu_cgroup_unattributed_events_total."),
		errors:       desc("cgroup_attribution_errors_total", "Failures in the per-cgroup attribution, by reason (map_full: credits lost because --collector.cgroup.max-tracked was reached).", "reason"),
		tracked:      desc("cgroup_tracked", "Cgroups held in the kernel's attribution map."),
		runs:         desc("self_bpf_runs_total", "Runs of each of the attribution's eBPF programs (program: the tracepoint it runs at, or credit_now, run before each read), early returns included, by the programs' own count.", "program"),
		runTime:      desc("self_bpf_run_seconds_total", "Run time of each of the attribution's eBPF programs, spent in the tasks that switch, by the kernel's bpf_stats: exported only while an operator has kernel.bpf_stats_enabled on (pmu_self_bpf_stats_enabled), which the exporter never turns on.", "program"),
		credits:      desc("self_bpf_credits_total", "Program runs that read every attributed event and credited a cgroup: the costly ones among pmu_self_bpf_runs_total."),
		timed:        desc("self_bpf_stats_enabled", "1 while the kernel measures BPF programs' run time (kernel.bpf_stats_enabled) and pmu_self_bpf_run_seconds_total is exported; 0: the programs' time is not measured."),
	}
}

var identityLabels = [4]string{"cgroup", "namespace", "pod", "container"}

// Describe sends the descriptors.
func (c *CgroupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.slots, c.nodeSlots, c.unattributed, c.missed, c.errors, c.tracked, c.perfModeFDs, c.runs, c.runTime, c.credits, c.timed} {
		ch <- d
	}
}

// Collect sends the latest cycle's values.
func (c *CgroupCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	for _, m := range c.series(s.Cgroups) {
		ch <- m
	}
	for _, e := range s.Unattributed {
		ch <- prometheus.MustNewConstMetric(c.unattributed, prometheus.CounterValue, e.Value, e.Event)
	}
	switch c.attribution {
	case Recorded:
		return
	case PerfCgroupMode:
		ch <- prometheus.MustNewConstMetric(c.perfModeFDs, prometheus.GaugeValue, float64(s.PerfModeFDs))
		ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(s.Tracked))
		return
	}
	ch <- prometheus.MustNewConstMetric(c.missed, prometheus.CounterValue, float64(s.Switches.SwitchesMissed))
	for _, r := range model.CgroupErrorReasons {
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(s.Errors[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(s.Tracked))
	c.collectCost(ch, s.Switches)
}

// collectCost sends what the attribution's programs cost.
func (c *CgroupCollector) collectCost(ch chan<- prometheus.Metric, st model.SwitchStats) {
	ch <- prometheus.MustNewConstMetric(c.credits, prometheus.CounterValue, float64(st.Credits))
	timed := 0.0
	if st.Timed {
		timed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.timed, prometheus.GaugeValue, timed)
	for _, p := range st.Programs {
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.CounterValue, float64(p.Runs), p.Name)
		if st.Timed {
			ch <- prometheus.MustNewConstMetric(c.runTime, prometheus.CounterValue, p.RunSeconds, p.Name)
		}
	}
}

// series builds the per-cgroup counters from the cached label pairs, each
// family in sort order: cgroups by path (the first label of the event and
// slot families), nodes by category first (the first label of theirs).
func (c *CgroupCollector) series(cgroups []model.Cgroup) []prometheus.Metric {
	order := make([]int, len(cgroups))
	n := 0
	for i, cg := range cgroups {
		order[i] = i
		n += len(cg.Events)
		if cg.HasSlots {
			n += 1 + len(cg.Nodes)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(cgroups[a].Path, cgroups[b].Path) })
	// One allocation for all the metrics and one for their values.
	out := make([]prometheus.Metric, 0, n)
	metrics := make([]counter, 0, n)
	emit := func(d *prometheus.Desc, l []*dto.LabelPair, v float64) {
		metrics = append(metrics, counter{desc: d, labels: l, value: v})
		out = append(out, &metrics[len(metrics)-1])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scrape++
	cached := make([]*cgroupLabels, len(cgroups))
	for _, i := range order {
		cached[i] = c.cached(cgroups[i])
	}
	for _, i := range order {
		for j, e := range cgroups[i].Events {
			emit(c.events, cached[i].eventLabels(c.events, j, e.Event), e.Value)
		}
	}
	for _, i := range order {
		if cgroups[i].HasSlots {
			emit(c.slots, cached[i].slotLabels(c.slots), cgroups[i].Slots)
		}
	}
	// The nodes by category, each category's cgroups in path order.
	type ref struct{ cg, node int }
	byName := map[string][]ref{}
	for _, i := range order {
		if cgroups[i].HasSlots {
			for j, nd := range cgroups[i].Nodes {
				byName[nd.Name] = append(byName[nd.Name], ref{i, j})
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		for _, r := range byName[name] {
			nd := cgroups[r.cg].Nodes[r.node]
			emit(c.nodeSlots, cached[r.cg].nodeLabels(c.nodeSlots, r.node, nd), nd.Slots)
		}
	}
	for p, l := range c.labels {
		if l.seen != c.scrape {
			delete(c.labels, p)
		}
	}
	return out
}

// cached returns the cgroup's label cache, rebuilt when its names changed.
func (c *CgroupCollector) cached(cg model.Cgroup) *cgroupLabels {
	id := c.identity(cg)
	l := c.labels[cg.Path]
	if l == nil || l.id != id {
		l = &cgroupLabels{id: id}
		c.labels[cg.Path] = l
	}
	l.seen = c.scrape
	return l
}

func (l *cgroupLabels) eventLabels(d *prometheus.Desc, i int, event string) []*dto.LabelPair {
	if i >= len(l.events) {
		l.events = append(l.events, make([]eventLabels, i+1-len(l.events))...)
	}
	if e := &l.events[i]; e.pairs == nil || e.event != event {
		*e = eventLabels{event, prometheus.MakeLabelPairs(d, append(l.id[:], event))}
	}
	return l.events[i].pairs
}

func (l *cgroupLabels) slotLabels(d *prometheus.Desc) []*dto.LabelPair {
	if l.slots == nil {
		l.slots = prometheus.MakeLabelPairs(d, l.id[:])
	}
	return l.slots
}

func (l *cgroupLabels) nodeLabels(d *prometheus.Desc, i int, n topdown.Node) []*dto.LabelPair {
	if i >= len(l.nodes) {
		l.nodes = append(l.nodes, make([]nodeLabels, i+1-len(l.nodes))...)
	}
	if e := &l.nodes[i]; e.pairs == nil || e.name != n.Name || e.parent != n.Parent || e.level != n.Level {
		*e = nodeLabels{n.Name, n.Parent, n.Level, prometheus.MakeLabelPairs(d, append(l.id[:], strconv.Itoa(n.Level), n.Name, n.Parent))}
	}
	return l.nodes[i].pairs
}

// counter is a counter over label pairs that outlive the scrape.
type counter struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
}

func (m *counter) Desc() *prometheus.Desc { return m.desc }

func (m *counter) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Counter = &dto.Counter{Value: &m.value}
	return nil
}

// identity is the cgroup, namespace, pod and container label values.
func (c *CgroupCollector) identity(cg model.Cgroup) [4]string {
	return identityValues(cg.Path, cg.Identity, c.names)
}

// identityValues are a cgroup's identity label values (names may be nil),
// made valid UTF-8: a cgroup directory may be named with any bytes, and one
// invalid label value fails its whole family's scrape.
func identityValues(path string, id podcgroup.Identity, names PodNames) [4]string {
	v := [4]string{strings.ToValidUTF8(path, "\uFFFD"), "", id.PodUID, id.ContainerID}
	if names != nil && id.PodUID != "" {
		if ns, pod, ctr, ok := names.Names(id); ok {
			v[1], v[2], v[3] = ns, pod, ctr
		}
	}
	return v
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
	return &PodMetaCollector{src: src,
		synced: desc("kubernetes_pods_synced", "Whether this node's pods have been listed from the Kubernetes API (1) or not yet (0: cgroup series carry pod UIDs and container IDs)."),
		errors: desc("kubernetes_api_errors_total", "Failed lists and watches of this node's pods."),
		count:  desc("kubernetes_pods", "Pods of this node known from the Kubernetes API."),
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
