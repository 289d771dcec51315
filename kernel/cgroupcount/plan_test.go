package cgroupcount

import (
	"reflect"
	"slices"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupbpf"
)

// The default software group, by hand: the clocks go last, the others keep
// their order.
func TestClocksLast(t *testing.T) {
	got := clocksLast([]string{"cpu-clock", "task-clock", "page-faults", "context-switches", "cycles"})
	want := []string{"page-faults", "context-switches", "cycles", "cpu-clock", "task-clock"}
	if !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// One perf group's slots: its lowest slot other than task-clock reads its
// own times, the higher ones share them (task-clock without a read), the
// lower ones read their own.
func TestSharedTimes(t *testing.T) {
	shared := func(from int, taskClock bool) cgroupbpf.How {
		return cgroupbpf.How{TimesFrom: from, Shared: true, TaskClock: taskClock}
	}
	for _, c := range []struct {
		slots []int
		names []string
		want  []cgroupbpf.How
	}{
		{[]int{3, 4, 6, 7}, []string{"page-faults", "context-switches", "cpu-clock", "task-clock"},
			[]cgroupbpf.How{{}, shared(3, false), shared(3, false), shared(3, true)}},
		// Slots in any order; task-clock below the source reads alone.
		{[]int{5, 2, 9}, []string{"cycles", "task-clock", "instructions"},
			[]cgroupbpf.How{{}, {}, shared(5, false)}},
		{[]int{0}, []string{"task-clock"}, []cgroupbpf.How{{}}},
		{nil, nil, []cgroupbpf.How{}},
	} {
		if got := sharedTimes(c.slots, c.names); !reflect.DeepEqual(got, c.want) {
			t.Errorf("slots %v %v: %+v, want %+v", c.slots, c.names, got, c.want)
		}
	}
}
