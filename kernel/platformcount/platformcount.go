// Package platformcount counts the platform PMUs' counters
// (analysis/platform): one event on each CPU its PMU names, read on
// demand, each opened alone. Most count free-running registers (RAPL
// energy, the MSRs, C-state residency) or fit their PMU's counters; where
// a PMU has fewer counters than events (AMD's data fabric: 48 DRAM
// events on a few counters) the kernel takes turns, and a count is
// scaled by the time its event was enabled over the time it counted.
package platformcount

import (
	"errors"
	"math"

	"github.com/pmu-exporter/pmu_exporter/analysis/platform"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// Counters are the open counters.
type Counters struct {
	cs   []platform.Counter
	open []opened
	val  [1]uint64
}

type opened struct {
	counter int
	g       *perf.Group
	last    uint64 // the last count handed out: scaled counts never go down
}

// Open opens every counter on each of its CPUs. A counter that cannot be
// opened on a CPU (offline, refused) is left out, its error returned
// among the others; the rest count.
func Open(cs []platform.Counter) (*Counters, error) {
	c := &Counters{cs: cs}
	var errs []error
	for i, pc := range cs {
		for _, cpu := range pc.CPUs {
			g, err := perf.OpenGroup([]eventspec.Attr{pc.Attr}, []string{pc.PMU + "/" + pc.Event + "/"}, perf.SystemWide(cpu))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.open = append(c.open, opened{counter: i, g: g})
		}
	}
	return c, errors.Join(errs...)
}

// Read hands fn each counter's count on each CPU since it was opened; a
// read that fails is skipped and its error returned with the others.
func (c *Counters) Read(fn func(pc *platform.Counter, cpu int, count uint64)) error {
	var errs []error
	for i := range c.open {
		o := &c.open[i]
		enabled, running, err := o.g.Read(c.val[:])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o.last = max(o.last, Scaled(c.val[0], enabled, running))
		fn(&c.cs[o.counter], o.g.CPU, o.last)
	}
	return errors.Join(errs...)
}

// Opened is how many (counter, CPU) events count.
func (c *Counters) Opened() int { return len(c.open) }

// Close closes every event.
func (c *Counters) Close() {
	for _, o := range c.open {
		o.g.Close()
	}
	c.open = nil
}

// Scaled is a count estimated over the whole time its event was enabled:
// as counted where it counted throughout (or never: nothing to scale by),
// else count × enabled / running, as perf stat scales a multiplexed event.
func Scaled(count, enabled, running uint64) uint64 {
	if running == 0 || running >= enabled {
		return count
	}
	return uint64(math.Round(float64(count) * float64(enabled) / float64(running)))
}
