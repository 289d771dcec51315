package cgroupattr

import (
	"testing"
	"time"
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
	tab.Update(t0, map[uint64][]Reading{7: {{1000, 200, 100}}}, p, true)
	tab.Update(t0.Add(time.Second), map[uint64][]Reading{7: {{1500, 300, 200}}}, p, true)
	if got := counts(t, tab)["/a"]; len(got) != 1 || got[0] != 2500 {
		t.Errorf("/a = %v, want 2000 + 500", got)
	}
	// The kernel entry was recreated (counts went down): it starts over.
	tab.Update(t0.Add(2*time.Second), map[uint64][]Reading{7: {{40, 10, 10}}}, p, true)
	if got := counts(t, tab)["/a"]; got[0] != 2540 {
		t.Errorf("/a after reset = %v, want 2540", got)
	}
}

// Beyond MaxSeries the smaller cgroups go to "other"; a place that frees up
// goes to the largest waiting cgroup; no counter ever goes down.
func TestBoundedSeriesAndGrace(t *testing.T) {
	tab := New(1, Options{MaxSeries: 2, Grace: 30 * time.Second})
	p := paths(map[uint64]string{1: "/big", 2: "/mid", 3: "/small"})
	tab.Update(t0, map[uint64][]Reading{1: {{300, 1, 1}}, 2: {{200, 1, 1}}, 3: {{100, 1, 1}}}, p, true)
	got := counts(t, tab)
	if got["/big"][0] != 300 || got["/mid"][0] != 200 || got[Other][0] != 100 || got["/small"] != nil {
		t.Fatalf("first update: %v", got)
	}
	// /big vanishes; within the grace period it keeps its series and /small waits.
	tab.Update(t0.Add(10*time.Second), map[uint64][]Reading{2: {{250, 2, 2}}, 3: {{150, 2, 2}}}, p, true)
	got = counts(t, tab)
	if got["/big"][0] != 300 || got["/mid"][0] != 250 || got[Other][0] != 150 {
		t.Fatalf("in grace: %v", got)
	}
	// After it, /big is dropped and /small gets a series from now on; what it
	// counted before stays in other.
	tab.Update(t0.Add(41*time.Second), map[uint64][]Reading{2: {{260, 3, 3}}, 3: {{170, 3, 3}}}, p, true)
	got = counts(t, tab)
	if got["/big"] != nil || got["/mid"][0] != 260 || got["/small"][0] != 0 || got[Other][0] != 170 {
		t.Fatalf("after grace: %v", got)
	}
	tab.Update(t0.Add(42*time.Second), map[uint64][]Reading{2: {{260, 4, 4}}, 3: {{180, 4, 4}}}, p, true)
	if got := counts(t, tab); got["/small"][0] != 10 || got[Other][0] != 170 {
		t.Fatalf("then: %v", got)
	}
	// A cgroup gone before it was ever resolved has no series of its
	// own: its counts go to "gone", each once, as it goes on being read
	// (issue 56: they went nowhere); the named cgroups are untouched.
	tab.Update(t0.Add(43*time.Second), map[uint64][]Reading{2: {{260, 5, 5}}, 3: {{180, 5, 5}}, 99: {{5, 1, 1}}}, p, true)
	tab.Update(t0.Add(44*time.Second), map[uint64][]Reading{2: {{260, 6, 6}}, 3: {{180, 6, 6}}, 99: {{12, 2, 2}}, 98: {{30, 4, 2}}}, p, true)
	got = counts(t, tab)
	if got[Gone][0] != 12+60 || got["/small"][0] != 10 || got[Other][0] != 170 || got["/mid"][0] != 260 {
		t.Errorf("gone before named: %v; want gone 12 (5, then 7 more) + 60 (30 scaled by enabled/running 4/2)", got)
	}
	// Where the hierarchy was not read after the readings (a walk that
	// failed), an id that does not resolve may be a cgroup not reached
	// yet: it waits, rather than going to gone.
	tab.Update(t0.Add(45*time.Second), map[uint64][]Reading{97: {{1000, 1, 1}}}, p, false)
	if got := counts(t, tab); got[Gone][0] != 72 || tab.byID[97] != nil {
		t.Errorf("an unresolved id while not current: %v", got)
	}
	// Gone, like other, never goes down when its cgroups are dropped.
	tab.Update(t0.Add(80*time.Second), map[uint64][]Reading{2: {{260, 7, 7}}, 3: {{180, 7, 7}}}, p, true)
	if got := counts(t, tab); got[Gone][0] != 72 || len(tab.byID) != 2 {
		t.Errorf("after the grace period: %v, %d cgroups held", got, len(tab.byID))
	}
}

// Rank picks which counts decide who gets a series: here the sum of indexes 1
// and 2 (one CPU-time event on each of two core types), not index 0.
func TestRankByChosenCounts(t *testing.T) {
	tab := New(3, Options{MaxSeries: 1, Grace: time.Minute, Rank: []int{1, 2}})
	p := paths(map[uint64]string{1: "/p-core", 2: "/e-core"})
	tab.Update(t0, map[uint64][]Reading{
		1: {{900, 1, 1}, {50, 1, 1}, {0, 1, 1}},
		2: {{1, 1, 1}, {10, 1, 1}, {60, 1, 1}},
	}, p, true)
	got := counts(t, tab)
	if got["/e-core"] == nil || got["/p-core"] != nil || got[Other][0] != 900 {
		t.Errorf("ranked by indexes 1+2 (50 vs 70), /e-core should win: %v", got)
	}
}
