package selftest

import (
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/validate"
)

// Event is an event to validate: the name its expectation is looked up by
// (validate.Expected), the name to report, and how to count it.
type Event struct {
	Name, Label string
	Counter     Counter
	CPU         int // where to run its kernels
	// Caches are the CPU's cache sizes in bytes, for the pointer chase
	// (zero: not known, the chase is not run).
	Caches struct{ L1d, L2, LLC uint64 }
}

// Validate runs each event's kernels on its CPU and judges the counts; an
// event with no known expectation, or that cannot be counted here, is a
// not_measurable row with the reason. quick runs fewer, smaller sizes.
func Validate(events []Event, quick bool) []validate.Result {
	var out []validate.Result
	for _, ev := range events {
		out = append(out, validateOne(ev, quick)...)
	}
	return out
}

func validateOne(ev Event, quick bool) []validate.Result {
	e, ok := validate.Expected[ev.Name]
	if !ok {
		return []validate.Result{validate.Unmeasurable(ev.Label, "", 0, "no kernel knows what this event should count")}
	}
	if e.Kernel == "branch" {
		var counts [7][]float64
		var sizes []float64
		for k := range 7 {
			kern := Branch(k, quick)
			c, err := Measure(ev.CPU, ev.Counter, kern)
			if err != nil {
				return []validate.Result{validate.Unmeasurable(ev.Label, kern.Name, validate.Signatures[e.Category][k], err.Error())}
			}
			counts[k], sizes = c, floats(kern.Sizes)
		}
		return validate.JudgeBranches(ev.Label, e.Category, sizes, counts)
	}
	if e.Kernel == "pointer-chase" {
		return []validate.Result{chase(ev, e, quick)}
	}
	counter := ev.Counter
	if e.Kernel == "watched-writes" { // the counter watches what the kernel writes
		counter.Watch = new(uint64)
	}
	kern, ok := kernelNamed(e.Kernel, quick, counter.Watch)
	if !ok {
		return []validate.Result{validate.Unmeasurable(ev.Label, e.Kernel, e.Slope, fmt.Sprintf("no kernel %q", e.Kernel))}
	}
	c, err := Measure(ev.CPU, counter, kern)
	if err != nil {
		return []validate.Result{validate.Unmeasurable(ev.Label, kern.Name, e.Slope, err.Error())}
	}
	if e.Linear {
		return []validate.Result{validate.JudgeLinear(ev.Label, kern.Name, floats(kern.Sizes), c)}
	}
	return []validate.Result{validate.Judge(ev.Label, kern.Name, e.Slope, floats(kern.Sizes), c)}
}

// chase runs the pointer chase for a miss event and judges where its
// count per step rises.
func chase(ev Event, e validate.Expectation, quick bool) validate.Result {
	capacity := map[string]uint64{"L1d": ev.Caches.L1d, "L2": ev.Caches.L2, "LLC": ev.Caches.LLC}[e.Cache]
	switch {
	case quick:
		return validate.Unmeasurable(ev.Label, "pointer-chase", 1, "the pointer chase runs in the full validation only (pmu_exporter validate)")
	case capacity == 0 || ev.Caches.LLC == 0:
		return validate.Unmeasurable(ev.Label, "pointer-chase", 1, "sysfs does not describe this CPU's "+e.Cache+" size")
	}
	kern := PointerChase(ev.Caches.L1d, ev.Caches.LLC)
	counts, err := Measure(ev.CPU, ev.Counter, kern)
	if err != nil {
		return validate.Unmeasurable(ev.Label, kern.Name, 1, err.Error())
	}
	perStep := make([]float64, len(counts))
	for i, c := range counts {
		perStep[i] = c / ChaseSteps
	}
	return validate.JudgeStep(ev.Label, kern.Name, float64(capacity), floats(kern.Sizes), perStep)
}

func kernelNamed(name string, quick bool, watched *uint64) (Kernel, bool) {
	for _, k := range []Kernel{InstructionLoop(quick), FreshPages(quick), PipeRoundTrips(quick), Spin(quick), WatchedWrites(quick, watched)} {
		if k.Name == name {
			return k, true
		}
	}
	return Kernel{}, false
}

func floats(sizes []int) []float64 {
	out := make([]float64, len(sizes))
	for i, s := range sizes {
		out[i] = float64(s)
	}
	return out
}
