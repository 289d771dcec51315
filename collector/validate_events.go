package collector

import (
	"errors"
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
)

// validationEvent is an event to validate: the name its expectation is looked up by
// (validate.Expected), the name to report, and how to count it.
type validationEvent struct {
	Name, Label string
	Counter     selftest.Counter
	CPU         int   // where to run its loops
	CPUs        []int // where it counts (a hybrid's core type); nil: every CPU
	// Caches are the CPU's cache sizes in bytes, for the pointer chase
	// (zero: not known, the chase is not run).
	Caches struct{ L1d, L2, LLC uint64 }
	// CacheSource is where the sizes came from (sysfs, CPUID), or why
	// none are known: the reason a chase is not run.
	CacheSource string
	// Unmeasurable, where set, is why the event is known not to count here
	// before any loop runs (the capability probe found a watchpoint that
	// opens but never fires): its row is not_measurable with this reason,
	// not a failure of the event.
	Unmeasurable string
}

// validateEvents runs each event's loops on its CPU and judges the counts; an
// event with no known expectation, or that cannot be counted here, is a
// not_measurable row with the reason. quick runs fewer, smaller sizes.
//
// move, where not nil, is asked for another CPU when an event's CPU was
// offline or went offline under its loops (selftest.ErrCPUWentOffline): a
// neighbour's hotplug must not make an event not measurable. The event is
// measured again there, three times in all at most, unless move says no,
// and the later events of the CPU it left go there too.
func validateEvents(events []validationEvent, quick bool, move func(ev validationEvent, err error) (cpu int, ok bool)) []validate.Result {
	var out []validate.Result
	moved := map[int]int{}
	for _, ev := range events {
		if to, ok := moved[ev.CPU]; ok {
			ev.CPU = to
		}
		for try := 1; ; try++ {
			rows, err := validateOne(ev, quick)
			if !errors.Is(err, selftest.ErrCPUWentOffline) || move == nil || try == 3 {
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
func validateOne(ev validationEvent, quick bool) (rows []validate.Result, err error) {
	e, ok := validate.Expected[ev.Name]
	if ev.Unmeasurable != "" {
		return []validate.Result{validate.Unmeasurable(ev.Label, e.Loop, e.Slope, ev.Unmeasurable)}, nil
	}
	if !ok {
		return []validate.Result{validate.Unmeasurable(ev.Label, "", 0, "no loop knows what this event should count")}, nil
	}
	if e.Loop == "branch" {
		var counts [7][]float64
		var sizes []float64
		for k := range 7 {
			kern := selftest.Branch(k, quick)
			c, err := selftest.Measure(ev.CPU, ev.Counter, kern)
			if err != nil {
				return []validate.Result{validate.Unmeasurable(ev.Label, kern.Name, validate.Signatures[e.Category][k], err.Error())}, err
			}
			counts[k], sizes = c, floats(kern.Sizes)
		}
		return validate.JudgeBranches(ev.Label, e.Category, sizes, counts), nil
	}
	if e.Loop == "pointer-chase" {
		r, err := chase(ev, e, quick)
		return []validate.Result{r}, err
	}
	counter := ev.Counter
	if e.Loop == "watched-writes" { // the counter watches what the loop writes
		counter.Watch = new(uint64)
	}
	kern, ok := loopNamed(e.Loop, quick, counter.Watch)
	if !ok {
		return []validate.Result{validate.Unmeasurable(ev.Label, e.Loop, e.Slope, fmt.Sprintf("no loop %q", e.Loop))}, nil
	}
	c, err := selftest.Measure(ev.CPU, counter, kern)
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
func chase(ev validationEvent, e validate.Expectation, quick bool) (validate.Result, error) {
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
	kern := selftest.PointerChase(ev.Caches.L1d, ev.Caches.LLC)
	counts, err := selftest.Measure(ev.CPU, ev.Counter, kern)
	if err != nil {
		return validate.Unmeasurable(ev.Label, kern.Name, 1, err.Error()), err
	}
	perStep := make([]float64, len(counts))
	for i, c := range counts {
		perStep[i] = c / selftest.ChaseSteps
	}
	return validate.JudgeStep(ev.Label, kern.Name, float64(capacity), floats(kern.Sizes), perStep), nil
}

func loopNamed(name string, quick bool, watched *uint64) (selftest.Loop, bool) {
	for _, k := range []selftest.Loop{selftest.InstructionLoop(quick), selftest.FreshPages(quick), selftest.PipeRoundTrips(quick), selftest.Spin(quick), selftest.WatchedWrites(quick, watched)} {
		if k.Name == name {
			return k, true
		}
	}
	return selftest.Loop{}, false
}

func floats(sizes []int) []float64 {
	out := make([]float64, len(sizes))
	for i, s := range sizes {
		out[i] = float64(s)
	}
	return out
}
