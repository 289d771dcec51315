package perfsample

import (
	"testing"

	"github.com/pmu-exporter/pmu_exporter/comm/reuse"
)

// The totals of exited processes are forgotten with their cgroup, except
// where a watched process still reports that cgroup (it moved out before
// the cgroup was removed): forgetting them would make its counters go down.
func TestForgetReuseCgroups(t *testing.T) {
	gone := func(samples uint64) *reuse.Tracker {
		tr := reuse.New(nil, reuse.Options{})
		tr.Samples = samples
		return tr
	}
	d := &Decoder{
		trackers:    map[uint32]*reuse.Tracker{7: gone(1)},
		reuseCgroup: map[uint32]uint64{7: 30},
		reuseGone:   map[uint64]*reuse.Tracker{10: gone(5), 20: gone(6), 30: gone(7)},
	}
	d.ForgetReuseCgroups([]uint64{10, 30, 99})
	seen := map[uint64]uint64{}
	d.ReuseView(func(pid uint32, cg uint64, t *reuse.Tracker) {
		if pid == 0 {
			seen[cg] = t.Samples
		}
	})
	if len(seen) != 2 || seen[20] != 6 || seen[30] != 7 {
		t.Errorf("totals of processes gone after forgetting cgroups 10, 30 and 99: %v, want 20 (6 samples) and 30 (7: pid 7 still reports it)", seen)
	}
	ids := d.ReuseCgroupIDs()
	if len(ids) != 2 {
		t.Errorf("ReuseCgroupIDs %v, want 20 and 30", ids)
	}
}
