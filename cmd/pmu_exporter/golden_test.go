package main

import (
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// Each enabled collector reports its latest cycle; a disabled one has no
// series; one that cannot run on this host is unavailable, not failed:
// pmu_collector_available 0, and no success series.
func TestCollectorHealth(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []struct {
		args   []string
		cgroup bool
	}{{nil, true}, {[]string{"--no-collector.cgroup"}, false}} {
		p := start(t, nil, c.args...)
		time.Sleep(300 * time.Millisecond) // a few 100 ms cycles after ready
		_, mfs := p.scrape(t)
		success := func(name string) (float64, bool) {
			return value(t, mfs, "pmu_collector_success", map[string]string{"collector": name})
		}
		if v, ok := success("counting"); !ok || v != 1 {
			t.Errorf("%v: counting success %v, %v", c.args, v, ok)
		}
		if v, ok := success("cgroup"); ok != c.cgroup || (ok && v != 1) {
			t.Errorf("%v: cgroup success %v (exported %v); root with eBPF attributes here", c.args, v, ok)
		}
		// Top-Down where this host has a tree; where it has none (most
		// VMs), unavailable rather than failed (issue 57).
		_, topdown := value(t, mfs, "pmu_topdown_info", nil)
		available, _ := value(t, mfs, "pmu_collector_available", map[string]string{"collector": "topdown"})
		if v, ok := success("topdown"); ok != topdown || (ok && v != 1) || (available == 1) != topdown {
			t.Errorf("%v: topdown success %v (exported %v), available %v, Top-Down computed %v", c.args, v, ok, available, topdown)
		}
	}
}
