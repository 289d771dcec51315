package cgroupattr

import (
	"reflect"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/model"
)

// A tree /top(1)/pods(2)/{a(3), b(4)}: tasks in a, b and pods itself. Each
// read's changes reach a cgroup and its ancestors, so that each ancestor
// holds exactly what the kernel once credited it level by level: pods =
// own + a + b, top = pods's total. Values by hand.
func TestRollupSumsIntoAncestors(t *testing.T) {
	anc := map[uint64][]uint64{3: {1, 2}, 4: {1, 2}, 2: {1}}
	ancestors := func(id uint64) []uint64 { return anc[id] }
	r := NewRollup(1)
	got := r.Update(map[uint64][]model.CgroupReading{3: {{Counter: 100, Enabled: 10, Running: 10}}, 4: {{Counter: 50, Enabled: 20, Running: 10}}, 2: {{Counter: 7, Enabled: 1, Running: 1}}}, ancestors)
	want := map[uint64][]model.CgroupReading{
		3: {{Counter: 100, Enabled: 10, Running: 10}}, 4: {{Counter: 50, Enabled: 20, Running: 10}},
		2: {{Counter: 157, Enabled: 31, Running: 21}}, 1: {{Counter: 157, Enabled: 31, Running: 21}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("first read: %v, want %v", got, want)
	}
	// a grows by 30; b's entry was recreated in the kernel (its counts
	// went down) and counts 5 from zero; pods's own did not change.
	got = r.Update(map[uint64][]model.CgroupReading{3: {{Counter: 130, Enabled: 13, Running: 13}}, 4: {{Counter: 5, Enabled: 1, Running: 1}}, 2: {{Counter: 7, Enabled: 1, Running: 1}}}, ancestors)
	want = map[uint64][]model.CgroupReading{
		3: {{Counter: 130, Enabled: 13, Running: 13}}, 4: {{Counter: 55, Enabled: 21, Running: 11}},
		2: {{Counter: 192, Enabled: 35, Running: 25}}, 1: {{Counter: 192, Enabled: 35, Running: 25}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("second read: %v, want %v", got, want)
	}
}

// A cgroup removed between two reads, seen only in its last one, still
// reaches its ancestors; forgotten, it leaves its share with them, and the
// ancestors' totals never go down.
func TestRollupKeepsWhatRemovedCgroupsGave(t *testing.T) {
	anc := map[uint64][]uint64{3: {1, 2}, 5: {1, 2}}
	ancestors := func(id uint64) []uint64 { return anc[id] }
	r := NewRollup(1)
	r.Update(map[uint64][]model.CgroupReading{3: {{Counter: 10, Enabled: 1, Running: 1}}}, ancestors)
	got := r.Update(map[uint64][]model.CgroupReading{3: {{Counter: 10, Enabled: 1, Running: 1}}, 5: {{Counter: 40, Enabled: 4, Running: 4}}}, ancestors) // 5 born and died meanwhile
	if got[2][0].Counter != 50 || got[1][0].Counter != 50 {
		t.Fatalf("ancestors %v and %v, want 10 + 40", got[2], got[1])
	}
	r.Forget(5)
	got = r.Update(map[uint64][]model.CgroupReading{3: {{Counter: 12, Enabled: 2, Running: 2}}}, ancestors)
	if _, ok := got[5]; ok {
		t.Errorf("forgotten cgroup 5 still has a total: %v", got[5])
	}
	if got[2][0].Counter != 52 || got[1][0].Counter != 52 {
		t.Errorf("ancestors %v and %v after 5 was forgotten, want 52", got[2], got[1])
	}
}

// A cgroup listed among its own ancestors (a malformed record) is credited
// once.
func TestRollupCreditsItselfOnce(t *testing.T) {
	r := NewRollup(1)
	got := r.Update(map[uint64][]model.CgroupReading{3: {{Counter: 10, Enabled: 1, Running: 1}}}, func(uint64) []uint64 { return []uint64{1, 3} })
	if got[3][0].Counter != 10 || got[1][0].Counter != 10 {
		t.Errorf("got %v", got)
	}
}
