// Package readformat turns successive cumulative reads of one event group
// (read_format GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING) into
// monotonic, multiplex-scaled totals, the scaling perf_event_open(2) gives
// for those fields and libperf does beside its reads
// (perf_counts_values__scale): so it sits with the formats, below the
// kernel packages that read and the analysis that judges the scaling. Like perf stat's interval mode, each interval
// is scaled on its own: raw delta × Δtime_enabled / Δtime_running. An interval in
// which the group never ran yields no value (not a zero) and is counted as such.
// Counters run free and are never reset, so deltas use wrapping uint64 arithmetic.
// The package is pure arithmetic; the reads come from kernel/perf.
package readformat

import "math/bits"

// Reading is one cumulative group read: times in nanoseconds, one value per event.
type Reading struct {
	Enabled, Running uint64
	Values           []uint64
}

// Accumulator holds one group's totals on one CPU.
type Accumulator struct {
	prevEnabled, prevRunning uint64
	prev                     []uint64

	// Totals are the scaled counts since the accumulator was made, per event.
	Totals []uint64
	// EnabledNS and RunningNS sum the group's enabled and running time; their ratio
	// is the multiplexing factor.
	EnabledNS, RunningNS uint64
	// Intervals counts Add calls; NotRunning those in which the group did not run.
	Intervals, NotRunning uint64
}

// New returns an accumulator for a group of n events whose counters were just
// opened, so they start from zero: nothing counted before the first read is lost.
func New(n int) *Accumulator {
	return &Accumulator{prev: make([]uint64, n), Totals: make([]uint64, n)}
}

// Rebase starts a new baseline of zero for a group that was reopened (after CPU
// hotplug), keeping the totals so exported counters stay monotonic.
func (a *Accumulator) Rebase() {
	a.prevEnabled, a.prevRunning = 0, 0
	clear(a.prev)
}

// Add folds in a new cumulative reading and reports whether the group ran in the
// interval. r.Values must have the group's length.
func (a *Accumulator) Add(r Reading) (ran bool) {
	de := r.Enabled - a.prevEnabled
	dr := r.Running - a.prevRunning
	a.Intervals++
	a.EnabledNS += de
	a.RunningNS += dr
	ran = dr != 0
	if !ran {
		a.NotRunning++
	}
	for i, v := range r.Values {
		if ran {
			a.Totals[i] += Scale(v-a.prev[i], de, dr)
		}
		a.prev[i] = v
	}
	a.prevEnabled, a.prevRunning = r.Enabled, r.Running
	return ran
}

// Scale returns delta × enabled / running, rounded to nearest, computed in 128 bits
// so no product overflows; a result beyond 64 bits saturates. running must be > 0.
// When the group ran the whole time (enabled == running) delta is returned as is.
func Scale(delta, enabled, running uint64) uint64 {
	if enabled == running || running == 0 {
		return delta
	}
	hi, lo := bits.Mul64(delta, enabled)
	if hi >= running {
		return ^uint64(0)
	}
	q, rem := bits.Div64(hi, lo, running)
	if rem >= running-rem && q != ^uint64(0) {
		q++
	}
	return q
}
