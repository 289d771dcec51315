package exporter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHealth(t *testing.T) {
	h := NewHealth("counting", "cgroup")
	h.Observe("counting", 1500*time.Microsecond, nil)
	h.Observe("cgroup", 2*time.Millisecond, errors.New("map read failed"))
	h.Observe("topdown", time.Second, nil) // not running: not exported
	want := `
# HELP pmu_collector_duration_seconds How long the collector's latest cycle took.
# TYPE pmu_collector_duration_seconds gauge
pmu_collector_duration_seconds{collector="cgroup"} 0.002
pmu_collector_duration_seconds{collector="counting"} 0.0015
# HELP pmu_collector_success Whether the collector's latest cycle succeeded (1) or failed or has not run yet (0).
# TYPE pmu_collector_success gauge
pmu_collector_success{collector="cgroup"} 0
pmu_collector_success{collector="counting"} 1
`
	if err := testutil.CollectAndCompare(h, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// A later success replaces the failure.
	h.Time("cgroup", func() error { return nil })
	want = `
# HELP pmu_collector_success Whether the collector's latest cycle succeeded (1) or failed or has not run yet (0).
# TYPE pmu_collector_success gauge
pmu_collector_success{collector="cgroup"} 1
pmu_collector_success{collector="counting"} 1
`
	if err := testutil.CollectAndCompare(h, strings.NewReader(want), "pmu_collector_success"); err != nil {
		t.Error(err)
	}
}
