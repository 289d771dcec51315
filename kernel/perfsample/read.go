package perfsample

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/formats/spe"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
)

// ReadError is a record ReadAll skipped: Reason "decode" (a record its
// event's layout does not fit) or "ring" (a corrupt header, the rest of
// that ring's data dropped); or "aux", an AUX event that could not be
// stopped and started (its records not flushed, or the event left
// stopped after its area filled).
type ReadError struct {
	Reason string
	Err    error
}

// ReadAll drains every ring into the consumer, in one pass. Records that
// cannot be read are counted there (Error) and skipped; it returns the
// first error of each ring and reason.
func (s *Sampler) ReadAll() []ReadError {
	var smp perfrecord.Sample
	var errs []ReadError
	b := s.sink
	cut, ok := MonotonicNow() // what any ring can hold by the time it is read
	if !ok {
		cut = math.MaxUint64 // unreadable: nothing waits
	}
	b.Begin()
	defer func() { b.End(cut) }() // after every ring: the decoder merges them by time
	if time.Since(s.flushed) >= max(s.opts.Poll, time.Millisecond) {
		// Not at every wake: a ring woken by its switch records alone
		// must not stop every CPU's unit.
		errs = append(errs, s.flushAux(b)...)
		s.flushed = time.Now()
	}
	for _, cpu := range s.order {
		errs = append(errs, s.readCPU(b, s.cpus[cpu], &smp)...)
	}
	return errs
}

// flushAux has every AUX event write out what its unit has taken so far:
// stopped (PERF_EVENT_IOC_DISABLE), the SPE driver ends the AUX chunk and
// writes its AUX record, and the event starts again at once. Without it a
// CPU's records would come a quarter of its AUX area at a time, seconds
// apart at a governed rate: the metrics would lag by as much, and the
// decoder, which merges the CPUs' samples by time up to the pass's cut,
// would take one CPU's seconds before another's. Records taken between
// the two ioctls are lost.
func (s *Sampler) flushAux(b Consumer) []ReadError {
	var errs []ReadError
	for _, cpu := range s.order {
		for _, a := range s.cpus[cpu].aux {
			err := perf.Disable(a.fd)
			if err == nil {
				err = perf.Enable(a.fd)
			}
			if err != nil {
				b.Error("aux")
				errs = append(errs, ReadError{"aux", fmt.Errorf("%s on CPU %d: flushing its AUX area: %w", s.cfgs[a.cfg].Name, cpu, err)})
			}
		}
	}
	return errs
}

// readCPU drains a CPU's rings into the stats: the shared one, then each
// AUX event's. It returns the first error of each ring and reason.
func (s *Sampler) readCPU(b Consumer, ce *cpuEvents, smp *perfrecord.Sample) []ReadError {
	var errs []ReadError
	read := func(r *perfring.Ring, each func(rec []byte) error) {
		var decodeErr error
		_, err := r.Read(func(rec []byte) bool {
			if err := each(rec); err != nil {
				b.Error("decode")
				if decodeErr == nil {
					decodeErr = err
				}
			}
			return true
		})
		if decodeErr != nil {
			errs = append(errs, ReadError{"decode", decodeErr})
		}
		if err != nil {
			b.Error("ring")
			errs = append(errs, ReadError{"ring", err})
		}
	}
	if ce.ring != nil {
		read(ce.ring, func(rec []byte) error { return s.record(b, rec, smp) })
	}
	for _, a := range ce.aux {
		if tc, ok := a.ring.TimeConv(); ok { // the kernel updates it (a new sched_clock epoch)
			a.stream.TC = tc
		}
		var end uint64
		truncated := false
		other := a.stream.Other
		read(a.ring, func(rec []byte) error {
			aux, ok, err := s.auxRecord(b, a, rec, smp)
			if ok {
				end = max(end, aux.Offset+aux.Size)
				truncated = truncated || aux.Flags&perfrecord.AuxTruncated != 0
			}
			return err
		})
		b.Filtered(a.cfg, a.stream.Other-other)
		a.ring.ReleaseAux(end)
		if truncated {
			// The kernel stopped the event when the area filled; the
			// space is free again.
			if err := perf.Enable(a.fd); err != nil {
				b.Error("aux")
				errs = append(errs, ReadError{"aux", fmt.Errorf("%s: enabling it again after its AUX area filled: %w", s.cfgs[a.cfg].Name, err)})
			}
		}
	}
	return errs
}

// auxRecord takes a record of an AUX event's data area: a CPU-wide switch
// to the stream, the chunk an AUX record announces through the stream to
// the stats (returning the record), the others as any event's.
func (s *Sampler) auxRecord(b Consumer, a *auxRing, rec []byte, smp *perfrecord.Sample) (perfrecord.Aux, bool, error) {
	h, err := perfrecord.ParseHeader(rec)
	if err != nil {
		return perfrecord.Aux{}, false, err
	}
	switch h.Type {
	case unix.PERF_RECORD_SWITCH_CPU_WIDE:
		if h.Misc&unix.PERF_RECORD_MISC_SWITCH_OUT == 0 {
			return perfrecord.Aux{}, false, nil
		}
		sid, err := perfrecord.DecodeSampleID(rec, s.events.Attrs[a.cfg].Layout())
		if err != nil || len(rec) < perfrecord.HeaderSize+8 {
			return perfrecord.Aux{}, false, fmt.Errorf("context switch record: %v", err)
		}
		next := rec[perfrecord.HeaderSize:]
		a.stream.Switch(sid.Time, binary.LittleEndian.Uint32(next), binary.LittleEndian.Uint32(next[4:]))
		return perfrecord.Aux{}, false, nil
	case perfrecord.TypeAux:
		aux, err := perfrecord.DecodeAux(rec)
		if err != nil {
			return aux, false, err
		}
		b.AuxFlags(a.cfg, aux.Flags)
		data := a.area.Aux(aux.Offset, aux.Size)
		if data == nil {
			return aux, true, fmt.Errorf("AUX record of %d bytes at %d: more than the %d-byte area", aux.Size, aux.Offset, a.area.AuxSize())
		}
		offset := s.clockOffset.Load()
		period := s.periods[a.cfg].Load()
		cgroupOf := s.opts.CgroupOf
		if s.cfgs[a.cfg].SampleType&unix.PERF_SAMPLE_CGROUP == 0 {
			cgroupOf = nil
		}
		a.stream.Chunk(data, func(sm *perfrecord.Sample) {
			// Each record stands for the period's operations; its time
			// on CLOCK_MONOTONIC, as the other events' samples.
			sm.Period, sm.Time = period, uint64(int64(sm.Time)+offset)
			if cgroupOf != nil && sm.PID != spe.Unknown {
				if id, ok := cgroupOf(sm.PID); ok {
					sm.Cgroup, sm.Has = id, sm.Has|unix.PERF_SAMPLE_CGROUP
				}
			}
			b.Sample(a.cfg, &s.cfgs[a.cfg], sm)
		})
		return aux, true, nil
	}
	return perfrecord.Aux{}, false, s.record(b, rec, smp)
}

func (s *Sampler) record(b Consumer, rec []byte, smp *perfrecord.Sample) error {
	h, err := perfrecord.ParseHeader(rec)
	if err != nil {
		return err
	}
	switch h.Type {
	case perfrecord.TypeSample:
		i, err := s.events.ForSample(rec)
		if err != nil {
			return err
		}
		if err := perfrecord.DecodeSample(rec, &s.events.Layouts[i], smp); err != nil {
			return err
		}
		if s.cfgs[i].SampleType&unix.PERF_SAMPLE_PERIOD == 0 {
			smp.Period = s.periods[i].Load() // the record stands for the period in force
		}
		b.Sample(i, &s.cfgs[i], smp)
	case perfrecord.TypeMmap, perfrecord.TypeMmap2:
		if m, err := perfrecord.DecodeMmap(rec); err == nil {
			b.Mapped(m)
		}
	case perfrecord.TypeComm:
		if h.Misc&unix.PERF_RECORD_MISC_COMM_EXEC != 0 {
			if c, err := perfrecord.DecodeComm(rec); err == nil && c.PID == c.TID {
				b.Exec(c.PID)
			}
		}
	case perfrecord.TypeLost, perfrecord.TypeLostSamples: // the ring's losses, and the PMU's (PEBS, SPE)
		l, err := perfrecord.DecodeLost(rec)
		if err != nil {
			return err
		}
		i, _ := s.events.ForRecord(rec)
		b.Lost(i, l.Lost)
	case perfrecord.TypeThrottle:
		i, _ := s.events.ForRecord(rec)
		b.Throttled(i)
	}
	return nil
}

// drain reads a CPU's rings into the stats (a CPU about to be closed).
func (s *Sampler) drain(ce *cpuEvents) {
	var smp perfrecord.Sample
	s.sink.Begin()
	defer s.sink.End(0)         // the next pass merges its accesses with the other CPUs'
	s.readCPU(s.sink, ce, &smp) // its errors are counted in the consumer
}

// fdsOf are event i's fds, one per CPU it is open on.
func (s *Sampler) fdsOf(i int) []int {
	var fds []int
	for _, cpu := range s.order {
		if fd := s.cpus[cpu].fds[i]; fd >= 0 {
			fds = append(fds, fd)
		}
	}
	return fds
}

// SetPeriod sets event i's period on every CPU.
func (s *Sampler) SetPeriod(i int, period uint64) error {
	for _, fd := range s.fdsOf(i) {
		if err := perf.SetPeriod(fd, period); err != nil {
			return fmt.Errorf("%s every %d: %w", s.cfgs[i].Name, period, err)
		}
	}
	s.periods[i].Store(period)
	return nil
}

// Close closes everything.
func (s *Sampler) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	var errs []error
	for _, cpu := range slices.Clone(s.order) {
		errs = append(errs, s.closeCPU(cpu))
	}
	if s.poller != nil {
		errs = append(errs, s.poller.Close())
		s.poller = nil
	}
	return errors.Join(errs...)
}
