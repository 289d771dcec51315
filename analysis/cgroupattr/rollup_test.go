package cgroupattr

import (
	"reflect"
	"testing"
)

// A tree /top(1)/pods(2)/{a(3), b(4)}: tasks in a, b and pods itself. Each
// read's changes reach a cgroup and its ancestors, so that each ancestor
// holds exactly what the kernel once credited it level by level: pods =
// own + a + b, top = pods's total. Values by hand.
func TestRollupSumsIntoAncestors(t *testing.T) {
	anc := map[uint64][]uint64{3: {1, 2}, 4: {1, 2}, 2: {1}}
	ancestors := func(id uint64) []uint64 { return anc[id] }
	r := NewRollup(1)
	got := r.Update(map[uint64][]Reading{3: {{100, 10, 10}}, 4: {{50, 20, 10}}, 2: {{7, 1, 1}}}, ancestors)
	want := map[uint64][]Reading{
		3: {{100, 10, 10}}, 4: {{50, 20, 10}},
		2: {{157, 31, 21}}, 1: {{157, 31, 21}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("first read: %v, want %v", got, want)
	}
	// a grows by 30; b's entry was recreated in the kernel (its counts
	// went down) and counts 5 from zero; pods's own did not change.
	got = r.Update(map[uint64][]Reading{3: {{130, 13, 13}}, 4: {{5, 1, 1}}, 2: {{7, 1, 1}}}, ancestors)
	want = map[uint64][]Reading{
		3: {{130, 13, 13}}, 4: {{55, 21, 11}},
		2: {{192, 35, 25}}, 1: {{192, 35, 25}},
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
	r.Update(map[uint64][]Reading{3: {{10, 1, 1}}}, ancestors)
	got := r.Update(map[uint64][]Reading{3: {{10, 1, 1}}, 5: {{40, 4, 4}}}, ancestors) // 5 born and died meanwhile
	if got[2][0].Counter != 50 || got[1][0].Counter != 50 {
		t.Fatalf("ancestors %v and %v, want 10 + 40", got[2], got[1])
	}
	r.Forget(5)
	got = r.Update(map[uint64][]Reading{3: {{12, 2, 2}}}, ancestors)
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
	got := r.Update(map[uint64][]Reading{3: {{10, 1, 1}}}, func(uint64) []uint64 { return []uint64{1, 3} })
	if got[3][0].Counter != 10 || got[1][0].Counter != 10 {
		t.Errorf("got %v", got)
	}
}
