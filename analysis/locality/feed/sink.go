package feed

import (
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// Sink takes one sampler's records (kernel/perfsample.Consumer) into the
// stats, and the samples of Decode configs through the decoder. A read
// pass is Begin, the records, End: the stats' lock is held in between, the
// lock the samplers sharing a decoder (one per selected cgroup) share too.
type Sink struct {
	stats *samplestat.Stats
	dec   *Decoder // nil: no config decodes
	b     samplestat.Batch
}

// NewSink takes the samples into stats, those of Decode configs through
// dec where it is not nil.
func NewSink(stats *samplestat.Stats, dec *Decoder) *Sink {
	return &Sink{stats: stats, dec: dec}
}

// Begin starts a read pass.
func (s *Sink) Begin() { s.b = s.stats.Lock() }

// End ends a read pass: every ring was read up to cut (CLOCK_MONOTONIC ns),
// so the decoder feeds the accesses until then, merged by time (cut 0: a
// CPU's rings drained before it closes, whose accesses wait for the next
// pass).
func (s *Sink) End(cut uint64) {
	if s.dec != nil && cut > 0 {
		s.dec.flush(s.b, cut)
	}
	s.b.Unlock()
}

// Sample takes a sample of config i: to the decoder where the config is
// one of its (a precise sample with the width its instruction gives, or a
// timer sample resolved from its registers), else to the stats as it is.
func (s *Sink) Sample(i int, c *sampling.Config, smp *perfrecord.Sample) {
	d, b := s.dec, s.b
	if !c.Decode || d == nil {
		b.Sample(i, smp, c.Memory, c.AddrOnly)
		return
	}
	if c.Memory { // a precise sample: the table takes it as it is, with its width
		if c.AddrOnly && smp.Addr == 0 {
			b.Sample(i, smp, c.Memory, c.AddrOnly)
			return
		}
		d.mu.Lock()
		a, ok, _ := d.resolver.Precise(smp, smp.Period, c.IPAfter)
		d.mu.Unlock()
		b.Precise(i, smp, c.AddrOnly, a.Size)
		if ok {
			d.queue(a, smp, i, true)
		}
		return
	}
	d.mu.Lock()
	a, r := d.resolver.Sample(smp, smp.Period)
	d.mu.Unlock()
	if r != memop.Resolved {
		b.Unresolved(i)
		return
	}
	d.queue(a, smp, i, false)
}

// Lost, Throttled, Error, Filtered and AuxFlags count what the rings said
// of the records they could not give.
func (s *Sink) Lost(i int, n uint64)         { s.b.Lost(i, n) }
func (s *Sink) Throttled(i int)              { s.b.Throttled(i) }
func (s *Sink) Error(reason string)          { s.b.Error(reason) }
func (s *Sink) Filtered(i int, n uint64)     { s.b.Filtered(i, n) }
func (s *Sink) AuxFlags(i int, flags uint64) { s.b.AuxFlags(i, flags) }

// Mapped follows a new executable mapping: what was decoded in its range
// is stale.
func (s *Sink) Mapped(m perfrecord.Mmap) {
	if s.dec != nil {
		s.dec.Mapped(m)
	}
}

// Exec forgets what was known of a process that ran a new program.
func (s *Sink) Exec(pid uint32) {
	if s.dec != nil {
		s.dec.Exited(pid)
	}
}

// Seen fills each config's samples, lost and filtered records so far: what
// the sampler's governor reads.
func (s *Sink) Seen(out []uint64) {
	for i, e := range s.stats.Events() {
		if i < len(out) {
			out[i] = e.Samples + e.Lost + e.Filtered
		}
	}
}
