package sampling

import (
	"math"
	"time"
)

// Governor keeps sampling within its costs: no event may ask any CPU for
// more samples per second than a share of the kernel's
// perf_event_max_sample_rate (beyond it the kernel throttles, and samples
// are lost unevenly), and the exporter's own CPU time must stay under a
// budget (default 1% of one CPU). When either is exceeded it multiplies
// the period by the excess; when both are well below it steps back
// toward the configured period, never under it.
type Governor struct {
	Budget  float64 // CPU seconds per second the exporter may spend
	MaxRate float64 // samples per second per CPU per event (perf_event_max_sample_rate)
	// Headroom is the share of MaxRate aimed at; the rest absorbs bursts.
	Headroom float64
	Max      uint64 // largest period ever set
}

// MaxStep bounds one interval's increase, so a period the kernel did not
// take, or a burst, cannot run it away.
const MaxStep = 16

// NewGovernor is a governor with a budget in CPUs and the kernel's
// perf_event_max_sample_rate.
func NewGovernor(budget float64, maxSampleRate int) Governor {
	rate := float64(maxSampleRate)
	if rate <= 0 {
		rate = 100000 // the kernel's default
	}
	return Governor{Budget: budget, MaxRate: rate, Headroom: 0.5, Max: 1 << 32}
}

// Interval is what one event did over the last interval.
type Interval struct {
	Period  uint64        // the period in force
	Base    uint64        // the configured period, the floor
	Samples uint64        // samples it wrote, lost and throttled ones included
	CPUs    int           // CPUs it samples on
	Elapsed time.Duration // length of the interval
	// CPUTime is the exporter's own CPU time over the interval, shared by
	// Share of its events (the events' samples over all samples).
	CPUTime time.Duration
	Share   float64
}

// Next is the period for the next interval.
func (g Governor) Next(iv Interval) uint64 {
	if iv.Elapsed <= 0 || iv.Period == 0 {
		return max(iv.Period, iv.Base, 1)
	}
	secs := iv.Elapsed.Seconds()
	rate := float64(iv.Samples) / secs / float64(max(iv.CPUs, 1)) // per CPU
	cpu := iv.CPUTime.Seconds() / secs * iv.Share
	factor := 1.0
	if target := g.MaxRate * g.Headroom; rate > target {
		factor = rate / target
	}
	if g.Budget > 0 && cpu > g.Budget {
		factor = math.Max(factor, cpu/g.Budget)
	}
	p := float64(iv.Period)
	switch {
	case factor > 1:
		p *= math.Min(factor, MaxStep)
	case rate < g.MaxRate*g.Headroom/4 && (g.Budget <= 0 || cpu < g.Budget/4):
		p /= 2 // well within both: sample more again
	}
	return uint64(math.Min(math.Max(math.Ceil(p), float64(max(iv.Base, 1))), float64(g.Max)))
}
