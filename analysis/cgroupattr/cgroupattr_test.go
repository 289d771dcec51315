package cgroupattr

import (
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/model"
)

var t0 = time.Unix(1000, 0)

func paths(m map[uint64]string) func(uint64) (string, bool) {
	return func(id uint64) (string, bool) { p, ok := m[id]; return p, ok }
}

func counts(t *testing.T, tab *Table) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, s := range tab.Series() {
		out[s.Path] = s.Counts
	}
	return out
}

// Each cgroup is scaled by its own enabled/running, per interval: 1000 counted
// while running 100 of 200 ns enabled is 2000; then 500 more at full running.
func TestScalesPerCgroupAndInterval(t *testing.T) {
	tab := New(1, Options{MaxSeries: 10, Grace: time.Minute})
	p := paths(map[uint64]string{7: "/a"})
	tab.Update(t0, map[uint64][]model.CgroupReading{7: {{Counter: 1000, Enabled: 200, Running: 100}}}, p, true)
	tab.Update(t0.Add(time.Second), map[uint64][]model.CgroupReading{7: {{Counter: 1500, Enabled: 300, Running: 200}}}, p, true)
	if got := counts(t, tab)["/a"]; len(got) != 1 || got[0] != 2500 {
		t.Errorf("/a = %v, want 2000 + 500", got)
	}
	// The kernel entry was recreated (counts went down): it starts over.
	tab.Update(t0.Add(2*time.Second), map[uint64][]model.CgroupReading{7: {{Counter: 40, Enabled: 10, Running: 10}}}, p, true)
	if got := counts(t, tab)["/a"]; got[0] != 2540 {
		t.Errorf("/a after reset = %v, want 2540", got)
	}
}

// Beyond MaxSeries the smaller cgroups go to "other"; a place that frees up
// goes to the largest waiting cgroup; no counter ever goes down.
func TestBoundedSeriesAndGrace(t *testing.T) {
	tab := New(1, Options{MaxSeries: 2, Grace: 30 * time.Second})
	p := paths(map[uint64]string{1: "/big", 2: "/mid", 3: "/small"})
	tab.Update(t0, map[uint64][]model.CgroupReading{1: {{Counter: 300, Enabled: 1, Running: 1}}, 2: {{Counter: 200, Enabled: 1, Running: 1}}, 3: {{Counter: 100, Enabled: 1, Running: 1}}}, p, true)
	got := counts(t, tab)
	if got["/big"][0] != 300 || got["/mid"][0] != 200 || got[Other][0] != 100 || got["/small"] != nil {
		t.Fatalf("first update: %v", got)
	}
	// /big vanishes; within the grace period it keeps its series and /small waits.
	tab.Update(t0.Add(10*time.Second), map[uint64][]model.CgroupReading{2: {{Counter: 250, Enabled: 2, Running: 2}}, 3: {{Counter: 150, Enabled: 2, Running: 2}}}, p, true)
	got = counts(t, tab)
	if got["/big"][0] != 300 || got["/mid"][0] != 250 || got[Other][0] != 150 {
		t.Fatalf("in grace: %v", got)
	}
	// After it, /big is dropped and /small gets a series from now on; what it
	// counted before stays in other.
	tab.Update(t0.Add(41*time.Second), map[uint64][]model.CgroupReading{2: {{Counter: 260, Enabled: 3, Running: 3}}, 3: {{Counter: 170, Enabled: 3, Running: 3}}}, p, true)
	got = counts(t, tab)
	if got["/big"] != nil || got["/mid"][0] != 260 || got["/small"][0] != 0 || got[Other][0] != 170 {
		t.Fatalf("after grace: %v", got)
	}
	tab.Update(t0.Add(42*time.Second), map[uint64][]model.CgroupReading{2: {{Counter: 260, Enabled: 4, Running: 4}}, 3: {{Counter: 180, Enabled: 4, Running: 4}}}, p, true)
	if got := counts(t, tab); got["/small"][0] != 10 || got[Other][0] != 170 {
		t.Fatalf("then: %v", got)
	}
	// A cgroup gone before it was ever resolved has no series of its
	// own: its counts go to "gone", each once, as it goes on being read
	// (issue 56: they went nowhere); the named cgroups are untouched.
	tab.Update(t0.Add(43*time.Second), map[uint64][]model.CgroupReading{2: {{Counter: 260, Enabled: 5, Running: 5}}, 3: {{Counter: 180, Enabled: 5, Running: 5}}, 99: {{Counter: 5, Enabled: 1, Running: 1}}}, p, true)
	tab.Update(t0.Add(44*time.Second), map[uint64][]model.CgroupReading{2: {{Counter: 260, Enabled: 6, Running: 6}}, 3: {{Counter: 180, Enabled: 6, Running: 6}}, 99: {{Counter: 12, Enabled: 2, Running: 2}}, 98: {{Counter: 30, Enabled: 4, Running: 2}}}, p, true)
	got = counts(t, tab)
	if got[Gone][0] != 12+60 || got["/small"][0] != 10 || got[Other][0] != 170 || got["/mid"][0] != 260 {
		t.Errorf("gone before named: %v; want gone 12 (5, then 7 more) + 60 (30 scaled by enabled/running 4/2)", got)
	}
	// Where the hierarchy was not read after the readings (a walk that
	// failed), an id that does not resolve may be a cgroup not reached
	// yet: it waits, rather than going to gone.
	tab.Update(t0.Add(45*time.Second), map[uint64][]model.CgroupReading{97: {{Counter: 1000, Enabled: 1, Running: 1}}}, p, false)
	if got := counts(t, tab); got[Gone][0] != 72 || tab.byID[97] != nil {
		t.Errorf("an unresolved id while not current: %v", got)
	}
	// Gone, like other, never goes down when its cgroups are dropped.
	tab.Update(t0.Add(80*time.Second), map[uint64][]model.CgroupReading{2: {{Counter: 260, Enabled: 7, Running: 7}}, 3: {{Counter: 180, Enabled: 7, Running: 7}}}, p, true)
	if got := counts(t, tab); got[Gone][0] != 72 || len(tab.byID) != 2 {
		t.Errorf("after the grace period: %v, %d cgroups held", got, len(tab.byID))
	}
}

// Rank picks which counts decide who gets a series: here the sum of indexes 1
// and 2 (one CPU-time event on each of two core types), not index 0.
func TestRankByChosenCounts(t *testing.T) {
	tab := New(3, Options{MaxSeries: 1, Grace: time.Minute, Rank: []int{1, 2}})
	p := paths(map[uint64]string{1: "/p-core", 2: "/e-core"})
	tab.Update(t0, map[uint64][]model.CgroupReading{
		1: {{Counter: 900, Enabled: 1, Running: 1}, {Counter: 50, Enabled: 1, Running: 1}, {Counter: 0, Enabled: 1, Running: 1}},
		2: {{Counter: 1, Enabled: 1, Running: 1}, {Counter: 10, Enabled: 1, Running: 1}, {Counter: 60, Enabled: 1, Running: 1}},
	}, p, true)
	got := counts(t, tab)
	if got["/e-core"] == nil || got["/p-core"] != nil || got[Other][0] != 900 {
		t.Errorf("ranked by indexes 1+2 (50 vs 70), /e-core should win: %v", got)
	}
}
