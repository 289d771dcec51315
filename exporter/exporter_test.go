package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/model"
)

type fixed model.Snapshot

func (f fixed) Snapshot() model.Snapshot { return model.Snapshot(f) }

var snap = fixed{
	Events: []model.EventTotals{
		{Group: "core", Event: "cycles", PMU: "cpu", PerCPU: map[int]uint64{0: 3000, 1: 5000}},
		{Group: "core", Event: "instructions", PMU: "cpu", PerCPU: map[int]uint64{0: 1000, 1: 4000}},
		{Group: "never", Event: "ref-cycles", PMU: "cpu", PerCPU: map[int]uint64{}},
	},
	Groups: []model.GroupTotals{{
		Name: "core", EnabledNS: map[int]uint64{0: 2e9, 1: 2e9}, RunningNS: map[int]uint64{0: 1e9, 1: 5e8},
		NotRunning: 3, OpenCPUs: 1, Failures: map[model.OpenReason]int{model.ReasonNoDevice: 1},
	}},
	ReadErrors: map[string]uint64{"read": 2},
}

var report = capability.Report{Vendor: "GenuineIntel", Family: "6", Model: "106", Stepping: "6", CorePMU: "icelake",
	Features: []capability.Feature{{Name: "hardware_counters", Available: true}, {Name: "ibs"}}}

func TestCollectSummedOverCPUs(t *testing.T) {
	c := New(snap, report, Options{ConfigErrors: 1})
	want := `
# HELP pmu_events_total Event counts from perf_event_open, scaled for multiplexing (raw delta × Δtime_enabled/Δtime_running per interval) and summed over CPUs.
# TYPE pmu_events_total counter
pmu_events_total{event="cycles",pmu="cpu"} 8000
pmu_events_total{event="instructions",pmu="cpu"} 5000
# HELP pmu_group_enabled_seconds_total Time the event group was enabled, summed over CPUs; rate(running)/rate(enabled) is the share of time it held the counters.
# TYPE pmu_group_enabled_seconds_total counter
pmu_group_enabled_seconds_total{group="core"} 4
# HELP pmu_group_running_seconds_total Time the event group was counting on the PMU, summed over CPUs.
# TYPE pmu_group_running_seconds_total counter
pmu_group_running_seconds_total{group="core"} 1.5
# HELP pmu_group_not_running_intervals_total Read intervals, summed over CPUs, in which the group never got the counters and so produced no value.
# TYPE pmu_group_not_running_intervals_total counter
pmu_group_not_running_intervals_total{group="core"} 3
# HELP pmu_capability Whether this host offers a measurement feature (1) or not (0); ` + "`pmu_exporter check`" + ` says why and how to fix it.
# TYPE pmu_capability gauge
pmu_capability{feature="hardware_counters"} 1
pmu_capability{feature="ibs"} 0
# HELP pmu_info Processor identity and core PMU, and where the counts come from (source: perf_event, or replay of a recording), always 1.
# TYPE pmu_info gauge
pmu_info{family="6",hypervisor="false",model="106",pmu_name="icelake",source="perf_event",stepping="6",vendor="GenuineIntel"} 1
# HELP pmu_read_errors_total Failed reads in the counting loop, by reason.
# TYPE pmu_read_errors_total counter
pmu_read_errors_total{reason="online_cpus"} 0
pmu_read_errors_total{reason="read"} 2
# HELP pmu_config_errors Number of problems in the event configuration at start; the affected groups are not counted.
# TYPE pmu_config_errors gauge
pmu_config_errors 1
`
	names := []string{"pmu_events_total", "pmu_group_enabled_seconds_total", "pmu_group_running_seconds_total",
		"pmu_group_not_running_intervals_total", "pmu_capability", "pmu_info", "pmu_read_errors_total", "pmu_config_errors"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	failures := `
# HELP pmu_group_open_failures Number of CPUs on which the event group could not be opened, by reason; a reason that did not happen has no series.
# TYPE pmu_group_open_failures gauge
pmu_group_open_failures{group="core",reason="no_device"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(failures), "pmu_group_open_failures"); err != nil {
		t.Error(err)
	}
}

func TestCollectPerCPU(t *testing.T) {
	c := New(snap, report, Options{PerCPU: true})
	want := `
# HELP pmu_events_total Event counts from perf_event_open, scaled for multiplexing (raw delta × Δtime_enabled/Δtime_running per interval) and summed over CPUs.
# TYPE pmu_events_total counter
pmu_events_total{cpu="0",event="cycles",pmu="cpu"} 3000
pmu_events_total{cpu="1",event="cycles",pmu="cpu"} 5000
pmu_events_total{cpu="0",event="instructions",pmu="cpu"} 1000
pmu_events_total{cpu="1",event="instructions",pmu="cpu"} 4000
# HELP pmu_group_running_seconds_total Time the event group was counting on the PMU, summed over CPUs.
# TYPE pmu_group_running_seconds_total counter
pmu_group_running_seconds_total{cpu="0",group="core"} 1
pmu_group_running_seconds_total{cpu="1",group="core"} 0.5
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pmu_events_total", "pmu_group_running_seconds_total"); err != nil {
		t.Error(err)
	}
}

func TestCollectorPassesLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(New(snap, report, Options{PerCPU: true}))
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}
