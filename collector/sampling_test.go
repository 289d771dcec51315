package collector

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
)

// A cgroup's sampling totals are forgotten once the cgroup has been gone
// from the hierarchy for the grace period, not before, and a cgroup that
// still exists never is.
func TestSweepForgetsRemovedCgroups(t *testing.T) {
	_, dirs := testenv.Cgroups(t, "stays", "goes")
	stays, err := cgroupid.ID(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	goes, err := cgroupid.ID(dirs[1])
	if err != nil {
		t.Fatal(err)
	}
	c := &cgroupNames{r: cgroupid.New(testenv.Cgroup2Mount()), gone: map[uint64]time.Time{}}
	ids := []uint64{stays, goes}
	t0 := time.Now()
	if f := c.sweep(ids, t0, time.Minute); len(f) != 0 {
		t.Fatalf("forgot %v while both exist", f)
	}
	if err := os.Remove(dirs[1]); err != nil {
		t.Fatal(err)
	}
	if f := c.sweep(ids, t0.Add(time.Second), time.Minute); len(f) != 0 {
		t.Errorf("forgot %v as soon as it was gone", f)
	}
	if f := c.sweep(ids, t0.Add(30*time.Second), time.Minute); len(f) != 0 {
		t.Errorf("forgot %v within the grace period", f)
	}
	if f := c.sweep(ids, t0.Add(62*time.Second), time.Minute); !slices.Equal(f, []uint64{goes}) {
		t.Errorf("forgot %v after the grace period, want only %d", f, goes)
	}
	if path, _, ok := c.Cgroup(stays); !ok || path == "" {
		t.Errorf("the cgroup that stays does not resolve")
	}
}

// One sweep serves every holder of per-cgroup totals: a cgroup held by
// either, once gone for the grace period, is forgotten by both, and the
// gone-since time of a cgroup held by one only is not lost when the other
// does not hold it.
func TestSweepOnceForgetsInEveryHolder(t *testing.T) {
	_, dirs := testenv.Cgroups(t, "stays", "goes")
	var ids [2]uint64
	for i, d := range dirs {
		id, err := cgroupid.ID(d)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	stays, goes := ids[0], ids[1]
	// The removed cgroup is the second holder's alone: a sweep per holder
	// would drop its gone-since time while sweeping the first (which
	// does not hold it), and never forget it.
	held := [2]map[uint64]bool{{stays: true}, {goes: true}}
	holder := func(m map[uint64]bool) cgroupTotals {
		return cgroupTotals{
			ids: func() []uint64 {
				var out []uint64
				for id := range m {
					out = append(out, id)
				}
				return out
			},
			forget: func(f []uint64) {
				for _, id := range f {
					delete(m, id)
				}
			},
		}
	}
	c := &cgroupNames{r: cgroupid.New(testenv.Cgroup2Mount()), gone: map[uint64]time.Time{}}
	if err := os.Remove(dirs[1]); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.sweepOnce(t0, time.Minute, holder(held[0]), holder(held[1]))
	c.sweepOnce(t0.Add(30*time.Second), time.Minute, holder(held[0]), holder(held[1]))
	if !held[1][goes] {
		t.Fatalf("forgot the removed cgroup within the grace period: %v", held)
	}
	c.sweepOnce(t0.Add(61*time.Second), time.Minute, holder(held[0]), holder(held[1]))
	if held[1][goes] {
		t.Errorf("the removed cgroup is still held after the grace period: %v", held)
	}
	if !held[0][stays] {
		t.Errorf("forgot the cgroup that exists")
	}
}
