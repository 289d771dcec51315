package pipeline

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
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
