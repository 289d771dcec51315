package collector

import (
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
)

func softwareCounter(name string, config uint64) selftest.Counter {
	return selftest.Counter{Name: name, Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: config}}
}

// An event whose CPU is offline (selftest.ErrCPUWentOffline) is measured
// again where move says, and the later events of that CPU there too;
// without a move it stays not measurable, with that reason.
func TestValidateEventsMoveOffline(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	if err := os.WriteFile(ctl, []byte("0"), 0o644); err != nil {
		t.Fatalf("CPU %d offline: %v", cpu, err)
	}
	ev := validationEvent{Name: "task-clock", Label: "task-clock", CPU: cpu, Counter: softwareCounter("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK)}
	rows := validateEvents([]validationEvent{ev}, true, nil)
	if len(rows) != 1 || rows[0].Verdict != validate.NotMeasurable || !strings.Contains(rows[0].Reason, selftest.ErrCPUWentOffline.Error()) {
		t.Errorf("without a move: %+v", rows)
	}
	var asked []int
	pageFaults := validationEvent{Name: "page-faults", Label: "page-faults", CPU: cpu, Counter: softwareCounter("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS)}
	rows = validateEvents([]validationEvent{ev, pageFaults}, true, func(e validationEvent, err error) (int, bool) {
		asked = append(asked, e.CPU)
		return 0, true
	})
	if len(rows) != 2 || rows[0].Verdict != validate.Pass || rows[1].Verdict != validate.Pass || !slices.Equal(asked, []int{cpu}) {
		t.Errorf("moved to CPU 0 (asked to move from CPUs %v; the second event should follow the first): %+v", asked, rows)
	}
}

// An event the capability probe has proven cannot count here (a
// watchpoint that opens and never fires) is not_measurable with the
// probe's reason, and no loop runs for it: its Counter would fail every
// measurement.
func TestValidateUnmeasurableRunsNothing(t *testing.T) {
	ev := validationEvent{Name: "breakpoint", Label: "breakpoint", CPU: -1, Counter: selftest.Counter{Name: "breakpoint"},
		Unmeasurable: "the capability probe found no watchpoint firing here: counted 0 of 1000 writes"}
	moved := false
	rows := validateEvents([]validationEvent{ev}, true, func(validationEvent, error) (int, bool) { moved = true; return 0, false })
	if len(rows) != 1 {
		t.Fatalf("%+v", rows)
	}
	r := rows[0]
	if r.Verdict != validate.NotMeasurable || r.Reason != ev.Unmeasurable || r.Loop != validate.Expected["breakpoint"].Loop || moved {
		t.Errorf("%+v (moved %v)", r, moved)
	}
}
