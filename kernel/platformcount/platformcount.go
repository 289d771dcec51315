// Package platformcount counts the platform PMUs' counters
// (analysis/platform): one event on each CPU its PMU names, read on
// demand. These PMUs count free-running registers (RAPL energy, the MSRs,
// C-state residency), so no event ever waits for a counter and none is
// multiplexed: each is opened alone.
package platformcount

import (
	"errors"

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
			c.open = append(c.open, opened{i, g})
		}
	}
	return c, errors.Join(errs...)
}

// Read hands fn each counter's count on each CPU since it was opened; a
// read that fails is skipped and its error returned with the others.
func (c *Counters) Read(fn func(pc *platform.Counter, cpu int, count uint64)) error {
	var errs []error
	for _, o := range c.open {
		if _, _, err := o.g.Read(c.val[:]); err != nil {
			errs = append(errs, err)
			continue
		}
		fn(&c.cs[o.counter], o.g.CPU, c.val[0])
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
