package perfsample

import (
	"time"

	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// governing remembers the last interval's totals, to give the governor
// what each event did since.
type governing struct {
	s        *Sampler
	last     time.Time
	lastCPU  time.Duration
	lastSeen []uint64
}

func newGoverning(s *Sampler) *governing {
	g := &governing{s: s, last: time.Now(), lastCPU: perf.OwnCPU(), lastSeen: make([]uint64, len(s.cfgs))}
	g.seen(g.lastSeen)
	return g
}

// seen fills each event's samples, lost and filtered records so far.
func (g *governing) seen(out []uint64) { g.s.sink.Seen(out) }

func (g *governing) step() error {
	now, cpu := time.Now(), perf.OwnCPU()
	cur := make([]uint64, len(g.lastSeen))
	g.seen(cur)
	var total uint64
	for i := range cur {
		total += cur[i] - g.lastSeen[i]
	}
	for i, c := range g.s.cfgs {
		n := cur[i] - g.lastSeen[i]
		share := 0.0
		if total > 0 {
			share = float64(n) / float64(total)
		}
		period := g.s.Period(i)
		next := c.Align(g.s.opts.Governor.Next(sampling.Interval{Period: period, Base: c.Period, Samples: n, CPUs: len(g.s.fdsOf(i)),
			Elapsed: now.Sub(g.last), CPUTime: cpu - g.lastCPU, Share: share}))
		if next != period {
			if err := g.s.SetPeriod(i, next); err != nil {
				return err
			}
		}
	}
	g.last, g.lastCPU, g.lastSeen = now, cpu, cur
	return nil
}
