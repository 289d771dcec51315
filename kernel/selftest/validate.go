package selftest

import (
	"errors"
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
)

// Event is an event to validate: the name its expectation is looked up by
// (validate.Expected), the name to report, and how to count it.
type Event struct {
	Name, Label string
	Counter     Counter
	CPU         int   // where to run its kernels
	CPUs        []int // where it counts (a hybrid's core type); nil: every CPU
	// Caches are the CPU's cache sizes in bytes, for the pointer chase
	// (zero: not known, the chase is not run).
	Caches struct{ L1d, L2, LLC uint64 }
	// CacheSource is where the sizes came from (sysfs, CPUID), or why
	// none are known: the reason a chase is not run.
	CacheSource string
	// Unmeasurable, where set, is why the event is known not to count here
	// before any kernel runs (the capability probe found a watchpoint that
	// opens but never fires): its row is not_measurable with this reason,
	// not a failure of the event.
	Unmeasurable string
}

// Validate runs each event's kernels on its CPU and judges the counts; an
// event with no known expectation, or that cannot be counted here, is a
// not_measurable row with the reason. quick runs fewer, smaller sizes.
//
// move, where not nil, is asked for another CPU when an event's CPU was
// offline or went offline under its kernels (ErrCPUWentOffline): a
// neighbour's hotplug must not make an event not measurable. The event is
// measured again there, three times in all at most, unless move says no,
// and the later events of the CPU it left go there too.
func Validate(events []Event, quick bool, move func(ev Event, err error) (cpu int, ok bool)) []validate.Result {
	var out []validate.Result
	moved := map[int]int{}
	for _, ev := range events {
		if to, ok := moved[ev.CPU]; ok {
			ev.CPU = to
		}
		for try := 1; ; try++ {
			rows, err := validateOne(ev, quick)
			if !errors.Is(err, ErrCPUWentOffline) || move == nil || try == 3 {
				out = append(out, rows...)
				break
			}
			cpu, ok := move(ev, err)
			if !ok {
				out = append(out, rows...)
				break
			}
			moved[ev.CPU], ev.CPU = cpu, cpu
		}
	}
	return out
}

// validateOne judges one event; where a measurement failed, its rows are
// not_measurable and err is why.
func validateOne(ev Event, quick bool) (rows []validate.Result, err error) {
	e, ok := validate.Expected[ev.Name]
	if ev.Unmeasurable != "" {
		return []validate.Result{validate.Unmeasurable(ev.Label, e.Kernel, e.Slope, ev.Unmeasurable)}, nil
	}
	if !ok {
		return []validate.Result{validate.Unmeasurable(ev.Label, "", 0, "no kernel knows what this event should count")}, nil
	}
	if e.Kernel == "branch" {
		var counts [7][]float64
		var sizes []float64
		for k := range 7 {
			kern := Branch(k, quick)
			c, err := Measure(ev.CPU, ev.Counter, kern)
			if err != nil {
				return []validate.Result{validate.Unmeasurable(ev.Label, kern.Name, validate.Signatures[e.Category][k], err.Error())}, err
			}
			counts[k], sizes = c, floats(kern.Sizes)
		}
		return validate.JudgeBranches(ev.Label, e.Category, sizes, counts), nil
	}
	if e.Kernel == "pointer-chase" {
		r, err := chase(ev, e, quick)
		return []validate.Result{r}, err
	}
	counter := ev.Counter
	if e.Kernel == "watched-writes" { // the counter watches what the kernel writes
		counter.Watch = new(uint64)
	}
	kern, ok := kernelNamed(e.Kernel, quick, counter.Watch)
	if !ok {
		return []validate.Result{validate.Unmeasurable(ev.Label, e.Kernel, e.Slope, fmt.Sprintf("no kernel %q", e.Kernel))}, nil
	}
	c, err := Measure(ev.CPU, counter, kern)
	if err != nil {
		return []validate.Result{validate.Unmeasurable(ev.Label, kern.Name, e.Slope, err.Error())}, err
	}
	if e.Linear {
		return []validate.Result{validate.JudgeLinear(ev.Label, kern.Name, floats(kern.Sizes), c)}, nil
	}
	return []validate.Result{validate.Judge(ev.Label, kern.Name, e.Slope, floats(kern.Sizes), c)}, nil
}

// chase runs the pointer chase for a miss event and judges where its
// count per step rises.
func chase(ev Event, e validate.Expectation, quick bool) (validate.Result, error) {
	capacity := map[string]uint64{"L1d": ev.Caches.L1d, "L2": ev.Caches.L2, "LLC": ev.Caches.LLC}[e.Cache]
	switch {
	case quick:
		return validate.Unmeasurable(ev.Label, "pointer-chase", 1, "the pointer chase runs in the full validation only (pmu_exporter validate)"), nil
	case capacity == 0 || ev.Caches.LLC == 0:
		what := "this CPU's " + e.Cache + " and last-level cache sizes are not both known"
		if e.Cache == "LLC" { // one cache, not two (issue 57: "LLC and last-level")
			what = "this CPU's last-level cache size is not known"
		}
		return validate.Unmeasurable(ev.Label, "pointer-chase", 1, fmt.Sprintf("%s (caches: %s)", what, ev.CacheSource)), nil
	}
	kern := PointerChase(ev.Caches.L1d, ev.Caches.LLC)
	counts, err := Measure(ev.CPU, ev.Counter, kern)
	if err != nil {
		return validate.Unmeasurable(ev.Label, kern.Name, 1, err.Error()), err
	}
	perStep := make([]float64, len(counts))
	for i, c := range counts {
		perStep[i] = c / ChaseSteps
	}
	return validate.JudgeStep(ev.Label, kern.Name, float64(capacity), floats(kern.Sizes), perStep), nil
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
