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
	if err := testutil.CollectAndCompare(h, strings.NewReader(want), "pmu_collector_success", "pmu_collector_duration_seconds"); err != nil {
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
	// A collector this host cannot run is not a failed one: it has no
	// success or duration, and is marked unavailable.
	h.SetUnavailable("topdown")
	want = `
# HELP pmu_collector_available Whether the enabled collector can run on this host (1), or not, for a reason pmu_exporter check names (0: no Top-Down tree for this CPU, no precise sampler, no platform PMU; in replay, nothing recorded for it). pmu_collector_success and pmu_collector_duration_seconds cover the available ones only: a collector that cannot run here has not failed.
# TYPE pmu_collector_available gauge
pmu_collector_available{collector="cgroup"} 1
pmu_collector_available{collector="counting"} 1
pmu_collector_available{collector="topdown"} 0
# HELP pmu_collector_success Whether the collector's latest cycle succeeded (1) or failed or has not run yet (0).
# TYPE pmu_collector_success gauge
pmu_collector_success{collector="cgroup"} 1
pmu_collector_success{collector="counting"} 1
`
	if err := testutil.CollectAndCompare(h, strings.NewReader(want), "pmu_collector_success", "pmu_collector_available"); err != nil {
		t.Error(err)
	}
}

// TestHealthStuck: a cycle begun and never ended is stuck once it has run
// past the bound, and only then; one that ended, or a collector with no
// cycle running, never is.
func TestHealthStuck(t *testing.T) {
	h := NewHealth("counting", "comm")
	h.Time("counting", func() error { return nil })
	endComm := h.Begin("comm")
	endOther := h.Begin("comm")
	endOther()
	now := time.Now()
	if s := h.Stuck(now, time.Minute); len(s) != 0 {
		t.Fatalf("stuck before the bound: %v", s)
	}
	later := now.Add(90 * time.Second)
	s := h.Stuck(later, time.Minute)
	if len(s) != 1 || s["comm"] < 90*time.Second || s["comm"] > 91*time.Second {
		t.Fatalf("90 s after comm's cycle began, bound 1 m: stuck %v, want comm for 90 s", s)
	}
	if got := StuckText(s); !strings.HasPrefix(got, "comm for 1m30") {
		t.Errorf("StuckText = %q", got)
	}
	endComm()
	if s := h.Stuck(later, time.Minute); len(s) != 0 {
		t.Errorf("stuck after the cycle ended: %v", s)
	}
}
