package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupcount"
	"github.com/pmu-exporter/pmu_exporter/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/topdown"
)

type fixedCgroups struct{}

func (fixedCgroups) Snapshot() cgroupcount.Snapshot {
	pod := podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c", QoS: "burstable"}
	ctr := pod
	ctr.ContainerID, ctr.Runtime = "aaaa", "containerd"
	return cgroupcount.Snapshot{
		Cgroups: []cgroupcount.Cgroup{
			{Path: "/kubepods.slice/pod", Identity: pod, Events: []cgroupcount.Count{{Event: "cpu-clock", Value: 3e9}}},
			{Path: "/kubepods.slice/pod/ctr", Identity: ctr, Events: []cgroupcount.Count{{Event: "cpu-clock", Value: 2e9}},
				HasSlots: true, Slots: 800, Nodes: []topdown.Node{{Name: "retiring", Level: 1, Slots: 200}, {Name: "light_operations", Level: 2, Parent: "retiring", Slots: 150}}},
			{Path: "other", Events: []cgroupcount.Count{{Event: "cpu-clock", Value: 5}}},
		},
		Unattributed: []cgroupcount.Count{{Event: "cpu-clock", Value: 7}},
		Switches:     cgroupbpf.Stats{SwitchesMissed: 3},
		Errors:       map[string]uint64{cgroupcount.ErrMapFull: 2},
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
	c := NewCgroup(fixedCgroups{}, names{"0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c/aaaa": {"shop", "cart-7f9", "app"}}, false)
	want := `
# HELP pmu_cgroup_events_total Event counts attributed to a cgroup (and to its ancestors) in the kernel at each cgroup switch, scaled for multiplexing per interval, summed over CPUs. cgroup="other" holds the cgroups beyond --cgroup.max-series.
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
# HELP pmu_cgroup_attribution_errors_total Failures in the per-cgroup attribution, by reason (map_full: credits lost because --cgroup.max-tracked was reached).
# TYPE pmu_cgroup_attribution_errors_total counter
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
