package main

import (
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// Each enabled collector reports its latest cycle; a disabled one has no
// series; one that cannot run on this host reports 0, as its own families say.
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
		_, topdown := value(t, mfs, "pmu_topdown_info", nil)
		if v, ok := success("topdown"); !ok || (v == 1) != topdown {
			t.Errorf("%v: topdown success %v (exported %v), Top-Down computed %v", c.args, v, ok, topdown)
		}
	}
}
