// Package platformcount counts the platform PMUs' counters
// (plan/platform): one event on each CPU its PMU names, read on
// demand, each opened alone. Most count free-running registers (RAPL
// energy, the MSRs, C-state residency) or fit their PMU's counters; where
// a PMU has fewer counters than events (AMD's data fabric: 48 DRAM
// events on a few counters) the kernel takes turns, and a count is
// scaled by the time its event was enabled over the time it counted.
package platformcount

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/plan/platform"
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

// Rate is how fast a counter counts on one CPU, per second of the time
// its event was enabled, over window: the msr PMU's tsc gives the TSC's
// frequency, which Intel's Top-Down formulas below level 3 scale by. The
// kernel's enabled time, not a clock read beside the counter, is the
// denominator, so a late wake-up costs nothing.
func Rate(pc platform.Counter, cpu int, window time.Duration) (float64, error) {
	g, err := perf.OpenGroup([]eventspec.Attr{pc.Attr}, []string{pc.PMU + "/" + pc.Event + "/"}, perf.SystemWide(cpu))
	if err != nil {
		return 0, err
	}
	defer g.Close()
	var v [1]uint64
	enabled0, _, err := g.Read(v[:])
	if err != nil {
		return 0, err
	}
	count0 := v[0]
	time.Sleep(window)
	enabled1, running1, err := g.Read(v[:])
	if err != nil {
		return 0, err
	}
	if enabled1 <= enabled0 || running1 < enabled1 {
		return 0, fmt.Errorf("%s/%s/ on CPU %d did not count throughout (enabled %d ns, running %d ns)", pc.PMU, pc.Event, cpu, enabled1, running1)
	}
	return float64(v[0]-count0) / (float64(enabled1-enabled0) / 1e9), nil
}
