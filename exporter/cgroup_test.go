package exporter

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/model"
)

type fixedCgroups struct{}

func (fixedCgroups) Snapshot() model.CgroupSnapshot {
	pod := podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c", QoS: "burstable"}
	ctr := pod
	ctr.ContainerID, ctr.Runtime = "aaaa", "containerd"
	return model.CgroupSnapshot{
		Cgroups: []model.Cgroup{
			{Path: "/kubepods.slice/pod", Identity: pod, Events: []model.Count{{Event: "cpu-clock", Value: 3e9}}},
			{Path: "/kubepods.slice/pod/ctr", Identity: ctr, Events: []model.Count{{Event: "cpu-clock", Value: 2e9}},
				HasSlots: true, Slots: 800, Nodes: []topdown.Node{{Name: "retiring", Level: 1, Slots: 200}, {Name: "light_operations", Level: 2, Parent: "retiring", Slots: 150}}},
			{Path: "other", Events: []model.Count{{Event: "cpu-clock", Value: 5}}},
		},
		Unattributed: []model.Count{{Event: "cpu-clock", Value: 7}},
		Switches:     model.SwitchStats{SwitchesMissed: 3},
		Errors:       map[string]uint64{model.CgroupErrMapFull: 2},
		Tracked:      4,
	}
}

type names map[string][3]string

func (n names) Names(id podcgroup.Identity) (string, string, string, bool) {
	v, ok := n[id.PodUID+"/"+id.ContainerID]
	return v[0], v[1], v[2], ok
}

func TestCgroupCollector(t *testing.T) {
	// The API server knows the container but not (yet) the pod's own cgroup
	// entry: that one keeps the UID.
	c := NewCgroup(fixedCgroups{}, names{"0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c/aaaa": {"shop", "cart-7f9", "app"}}, AttributedByBPF)
	want := `
# HELP pmu_cgroup_events_total Event counts attributed to a cgroup (and to its ancestors) in the kernel at each cgroup switch, scaled for multiplexing per interval, summed over CPUs. cgroup="other" holds the cgroups beyond --collector.cgroup.max-series; cgroup="gone" those removed before the exporter read their path (a cgroup that lived less than --collector.counting.interval), whose counts are in their ancestors' series too.
# TYPE pmu_cgroup_events_total counter
pmu_cgroup_events_total{cgroup="/kubepods.slice/pod",container="",event="cpu-clock",namespace="",pod="0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c"} 3e+09
pmu_cgroup_events_total{cgroup="/kubepods.slice/pod/ctr",container="app",event="cpu-clock",namespace="shop",pod="cart-7f9"} 2e+09
pmu_cgroup_events_total{cgroup="other",container="",event="cpu-clock",namespace="",pod=""} 5
# HELP pmu_cgroup_slots_total Pipeline slots of the cgroup over which Top-Down was computed, summed over CPUs.
# TYPE pmu_cgroup_slots_total counter
pmu_cgroup_slots_total{cgroup="/kubepods.slice/pod/ctr",container="app",namespace="shop",pod="cart-7f9"} 800
# HELP pmu_cgroup_topdown_slots_total Slots of the cgroup attributed to a Top-Down node: its fraction of each interval's slots, accumulated.
# TYPE pmu_cgroup_topdown_slots_total counter
pmu_cgroup_topdown_slots_total{category="light_operations",cgroup="/kubepods.slice/pod/ctr",container="app",level="2",namespace="shop",parent="retiring",pod="cart-7f9"} 150
pmu_cgroup_topdown_slots_total{category="retiring",cgroup="/kubepods.slice/pod/ctr",container="app",level="1",namespace="shop",parent="",pod="cart-7f9"} 200
# HELP pmu_cgroup_unattributed_events_total Event counts of spans the kernel did not run the attribution program for at a cgroup switch, so that no one cgroup owns them.
# TYPE pmu_cgroup_unattributed_events_total counter
pmu_cgroup_unattributed_events_total{event="cpu-clock"} 7
# HELP pmu_cgroup_switches_missed_total Cgroup switches the kernel counted but did not run the attribution program for; their spans are in pmu_cgroup_unattributed_events_total.
# TYPE pmu_cgroup_switches_missed_total counter
pmu_cgroup_switches_missed_total 3
# HELP pmu_cgroup_attribution_errors_total Failures in the per-cgroup attribution, by reason (map_full: credits lost because --collector.cgroup.max-tracked was reached).
# TYPE pmu_cgroup_attribution_errors_total counter
pmu_cgroup_attribution_errors_total{reason="ancestry"} 0
pmu_cgroup_attribution_errors_total{reason="attach"} 0
pmu_cgroup_attribution_errors_total{reason="credit"} 0
pmu_cgroup_attribution_errors_total{reason="forget"} 0
pmu_cgroup_attribution_errors_total{reason="map_full"} 2
pmu_cgroup_attribution_errors_total{reason="place"} 0
pmu_cgroup_attribution_errors_total{reason="read"} 0
pmu_cgroup_attribution_errors_total{reason="walk"} 0
# HELP pmu_cgroup_tracked Cgroups held in the kernel's attribution map.
# TYPE pmu_cgroup_tracked gauge
pmu_cgroup_tracked 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pmu_cgroup_events_total", "pmu_cgroup_slots_total",
		"pmu_cgroup_topdown_slots_total", "pmu_cgroup_unattributed_events_total", "pmu_cgroup_switches_missed_total", "pmu_cgroup_tracked", "pmu_cgroup_attribution_errors_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// changing is a source whose cgroups the test replaces between scrapes.
type changing struct{ s model.CgroupSnapshot }

func (c *changing) Snapshot() model.CgroupSnapshot { return c.s }

func TestCgroupCollectorLabelCache(t *testing.T) {
	ctr := podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c", ContainerID: "aaaa"}
	one := func(path string, v float64) model.Cgroup {
		return model.Cgroup{Path: path, Identity: ctr, Events: []model.Count{{Event: "cpu-clock", Value: v}}}
	}
	src := &changing{model.CgroupSnapshot{Cgroups: []model.Cgroup{one("/b", 1), one("/a\xffz", 2)}}}
	pods := names{}
	c := NewCgroup(src, pods, AttributedByBPF)
	// A cgroup directory named with bytes that are not UTF-8 is exported
	// (with U+FFFD in their place), and the other cgroups are not lost.
	got := scrapeText(t, c)
	for _, want := range []string{
		`pmu_cgroup_events_total{cgroup="/a` + "\uFFFD" + `z",container="aaaa",event="cpu-clock",namespace="",pod="0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c"} 2`,
		`pmu_cgroup_events_total{cgroup="/b",container="aaaa",event="cpu-clock",namespace="",pod="0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in\n%s", want, got)
		}
	}
	// Names that arrive from the API server later replace the UIDs; a
	// cgroup gone is dropped from the cache.
	pods["0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c/aaaa"] = [3]string{"shop", "cart", "app"}
	src.s.Cgroups = []model.Cgroup{one("/b", 5)}
	got = scrapeText(t, c)
	if want := `pmu_cgroup_events_total{cgroup="/b",container="app",event="cpu-clock",namespace="shop",pod="cart"} 5`; !strings.Contains(got, want) || strings.Contains(got, `/a`) {
		t.Errorf("want only %s in\n%s", want, got)
	}
	if len(c.labels) != 1 {
		t.Errorf("label cache holds %d cgroups after one is gone, want 1", len(c.labels))
	}
	// Another event at the same position gets its own labels.
	src.s.Cgroups[0].Events[0].Event = "task-clock"
	got = scrapeText(t, c)
	if want := `pmu_cgroup_events_total{cgroup="/b",container="app",event="task-clock",namespace="shop",pod="cart"} 5`; !strings.Contains(got, want) || strings.Contains(got, `cpu-clock`) {
		t.Errorf("want only %s in\n%s", want, got)
	}
}

// scrapeText is the collector's text exposition through a registry.
func scrapeText(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// The cached series are exactly the series of constant metrics built afresh
// (client_golang sorts those itself), over many cgroups with Top-Down nodes,
// and stay so on the next scrape with new values.
func TestCgroupCollectorSameAsConst(t *testing.T) {
	src := &changing{cgroupSnapshot(60)}
	slices.Reverse(src.s.Cgroups) // not in path order
	cached := NewCgroup(src, nil, AttributedByBPF)
	for scrape := range 2 {
		want := perCgroupSeries(scrapeText(t, constCgroups{NewCgroup(src, nil, AttributedByBPF), src.s}))
		if got := perCgroupSeries(scrapeText(t, cached)); got != want || len(want) < 60*21*100 {
			t.Fatalf("scrape %d: cached series (%d bytes) differ from constant ones (%d bytes)", scrape, len(got), len(want))
		}
		for i := range src.s.Cgroups {
			src.s.Cgroups[i].Events[0].Value += 7
			src.s.Cgroups[i].Nodes[3].Slots *= 2
		}
	}
}

// perCgroupSeries are the exposition's lines of the per-cgroup families.
func perCgroupSeries(text string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		for _, f := range []string{"pmu_cgroup_events_total{", "pmu_cgroup_slots_total{", "pmu_cgroup_topdown_slots_total{"} {
			if strings.HasPrefix(l, f) {
				b.WriteString(l)
			}
		}
	}
	return b.String()
}

// The programs' own cost: runs by their own count always; run time only
// while the kernel measures it (bpf_stats), with the gauge saying which.
func TestCgroupCollectorProgramCost(t *testing.T) {
	progs := []model.BPFProgram{{Name: "sched_switch", Runs: 1000, RunSeconds: 0.25}, {Name: "cpu_idle", Runs: 40, RunSeconds: 0.5}}
	for _, timed := range []bool{false, true} {
		s := fixedCgroups{}.Snapshot()
		s.Switches = model.SwitchStats{Credits: 300, Programs: progs, Timed: timed}
		c := NewCgroup(&changing{s}, nil, AttributedByBPF)
		want := `# HELP pmu_self_bpf_credits_total Program runs that read every attributed event and credited a cgroup: the costly ones among pmu_self_bpf_runs_total.
# TYPE pmu_self_bpf_credits_total counter
pmu_self_bpf_credits_total 300
# HELP pmu_self_bpf_runs_total Runs of each of the attribution's eBPF programs (program: the tracepoint it runs at, or credit_now, run before each read), early returns included, by the programs' own count.
# TYPE pmu_self_bpf_runs_total counter
pmu_self_bpf_runs_total{program="cpu_idle"} 40
pmu_self_bpf_runs_total{program="sched_switch"} 1000
# HELP pmu_self_bpf_stats_enabled 1 while the kernel measures BPF programs' run time (kernel.bpf_stats_enabled) and pmu_self_bpf_run_seconds_total is exported; 0: the programs' time is not measured.
# TYPE pmu_self_bpf_stats_enabled gauge
`
		if timed {
			want += `pmu_self_bpf_stats_enabled 1
# HELP pmu_self_bpf_run_seconds_total Run time of each of the attribution's eBPF programs, spent in the tasks that switch, by the kernel's bpf_stats: exported only while an operator has kernel.bpf_stats_enabled on (pmu_self_bpf_stats_enabled), which the exporter never turns on.
# TYPE pmu_self_bpf_run_seconds_total counter
pmu_self_bpf_run_seconds_total{program="cpu_idle"} 0.5
pmu_self_bpf_run_seconds_total{program="sched_switch"} 0.25
`
		} else {
			want += "pmu_self_bpf_stats_enabled 0\n"
		}
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pmu_self_bpf_credits_total", "pmu_self_bpf_runs_total",
			"pmu_self_bpf_stats_enabled", "pmu_self_bpf_run_seconds_total"); err != nil {
			t.Errorf("timed %v: %v", timed, err)
		}
	}
}
