// Package perfsample runs the sampling events of a plan on every CPU: it
// opens each event per CPU with the CPU's first event owning the ring
// buffer and the others writing into it (PERF_EVENT_IOC_SET_OUTPUT, one
// mmap per CPU however many events), reads the rings when the kernel wakes
// it or on a short timer, hands every record to samplestat, and applies
// the governor's periods with PERF_EVENT_IOC_PERIOD. It is the only
// package of the sampling path that makes syscalls.
package perfsample

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/perf"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfring"
	"github.com/pmu-exporter/pmu_exporter/cpuset"
	"github.com/pmu-exporter/pmu_exporter/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/samplestat"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// Options size the buffers and pace the reader.
type Options struct {
	Logger   *slog.Logger  // where skipped records are reported (may be nil)
	Pages    int           // data pages per CPU ring (a power of two)
	Poll     time.Duration // longest wait between reads
	Govern   time.Duration // how often the governor runs
	Governor sampling.Governor
}

// Failure is a configured event that could not be opened on a CPU.
type Failure struct {
	Event string
	CPU   int
	Err   error
}

// Sampler is the open events and their rings.
type Sampler struct {
	cfgs    []sampling.Config
	opts    Options
	fds     [][]int // per config, its fds (one per CPU)
	leaders []int
	rings   []*perfring.Ring
	poller  *perfring.Poller
	events  *perfrecord.Events
	stats   *samplestat.Stats
	periods []atomic.Uint64
	closeMu sync.Mutex
}

const bitSampleIDAll = 1 << 18

// Open opens every config on each of its CPUs (cpus: the online ones).
// Configs that fail everywhere are reported and left out; Open fails only
// when nothing could be opened.
func Open(cfgs []sampling.Config, cpus []int, stats *samplestat.Stats, o Options) (*Sampler, []Failure, error) {
	s := &Sampler{opts: o, stats: stats}
	var failures []Failure
	var err error
	if s.poller, err = perfring.NewPoller(); err != nil {
		return nil, nil, err
	}
	ringOf := map[int]int{} // cpu → leader fd of its ring
	var attrs []perfrecord.Attr
	var ids [][]uint64
	var kept []sampling.Config
	for _, c := range cfgs {
		var fds []int
		var cfgIDs []uint64
		for _, cpu := range cpus {
			if c.CPUs != nil && !cpuset.Contains(c.CPUs, cpu) {
				continue
			}
			fd, leader, err := openOn(c, cpu)
			if err != nil {
				failures = append(failures, Failure{Event: c.Name, CPU: cpu, Err: err})
				continue
			}
			if err := s.attach(fd, cpu, ringOf); err != nil {
				unix.Close(fd)
				if leader >= 0 {
					unix.Close(leader)
				}
				failures = append(failures, Failure{Event: c.Name, CPU: cpu, Err: err})
				continue
			}
			id, err := eventID(fd)
			if err != nil {
				return nil, failures, errors.Join(err, s.Close())
			}
			fds = append(fds, fd)
			cfgIDs = append(cfgIDs, id)
			if leader >= 0 {
				s.leaders = append(s.leaders, leader)
			}
		}
		if len(fds) == 0 {
			continue
		}
		kept = append(kept, c)
		s.fds = append(s.fds, fds)
		ids = append(ids, cfgIDs)
		attrs = append(attrs, perfrecord.Attr{Type: c.Attr.Type, Config: c.Attr.Config, Period: c.Period,
			SampleType: c.SampleType, SampleIDAll: true})
	}
	if len(kept) == 0 {
		s.Close()
		return nil, failures, fmt.Errorf("no sampling event could be opened on any CPU (%d failures)", len(failures))
	}
	s.cfgs = kept
	if s.events, err = perfrecord.NewEvents(attrs, ids); err != nil {
		return nil, failures, errors.Join(err, s.Close())
	}
	s.periods = make([]atomic.Uint64, len(kept))
	for i, c := range kept {
		s.periods[i].Store(c.Period)
	}
	for _, fds := range s.fds {
		for _, fd := range fds {
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
				return nil, failures, errors.Join(fmt.Errorf("enabling a sampling event: %w", err), s.Close())
			}
		}
	}
	return s, failures, nil
}

// openOn opens c on cpu, disabled, after its leader when it has one.
func openOn(c sampling.Config, cpu int) (fd, leader int, err error) {
	leader = -1
	if c.Leader != nil {
		la := perf.Attr(*c.Leader)
		la.Read_format = 0
		la.Bits |= unix.PerfBitDisabled
		if leader, err = unix.PerfEventOpen(&la, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC); err != nil {
			return -1, -1, fmt.Errorf("perf_event_open(%s leader) on CPU %d: %w", c.Name, cpu, err)
		}
	}
	a := perf.Attr(c.Attr)
	a.Read_format = 0
	a.Sample = c.Period
	a.Sample_type = c.SampleType
	a.Bits |= unix.PerfBitDisabled | bitSampleIDAll | unix.PerfBitWatermark
	a.Wakeup = 4096 // bytes: wake the reader once a page has filled
	fd, err = unix.PerfEventOpen(&a, -1, cpu, leader, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if leader >= 0 {
			unix.Close(leader)
		}
		return -1, -1, fmt.Errorf("perf_event_open(%s, sample every %d) on CPU %d: %w", c.Name, c.Period, cpu, err)
	}
	if leader >= 0 {
		unix.IoctlSetInt(leader, unix.PERF_EVENT_IOC_ENABLE, 0)
	}
	return fd, leader, nil
}

// attach gives fd the CPU's ring: a new one for the CPU's first event,
// else the first event's through SET_OUTPUT.
func (s *Sampler) attach(fd, cpu int, ringOf map[int]int) error {
	if owner, ok := ringOf[cpu]; ok {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, owner); err != nil {
			return fmt.Errorf("PERF_EVENT_IOC_SET_OUTPUT on CPU %d: %w", cpu, err)
		}
		return nil
	}
	r, err := perfring.Open(fd, s.opts.Pages)
	if err != nil {
		return err
	}
	if err := s.poller.Add(r); err != nil {
		r.Close()
		return err
	}
	s.rings = append(s.rings, r)
	ringOf[cpu] = fd
	return nil
}

func eventID(fd int) (uint64, error) {
	var id uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id))); e != 0 {
		return 0, fmt.Errorf("PERF_EVENT_IOC_ID: %w", e)
	}
	return id, nil
}

// Configs are the events that opened, in the stats' event order.
func (s *Sampler) Configs() []sampling.Config { return s.cfgs }

// Period is the sampling period now in force for event i.
func (s *Sampler) Period(i int) uint64 { return s.periods[i].Load() }

// Run reads the rings until ctx ends, and governs the periods.
func (s *Sampler) Run(ctx context.Context) error {
	poll := max(s.opts.Poll, time.Millisecond)
	govern := time.NewTicker(max(s.opts.Govern, 10*time.Millisecond))
	defer govern.Stop()
	g := newGoverning(s)
	logged := map[string]bool{}
	for ctx.Err() == nil {
		if _, err := s.poller.Wait(int(poll / time.Millisecond)); err != nil {
			return err
		}
		// A bad record is counted (pmu_sampling_errors_total) and skipped;
		// the first of each kind is logged.
		for _, e := range s.ReadAll() {
			if !logged[e.Reason] && s.opts.Logger != nil {
				logged[e.Reason] = true
				s.opts.Logger.Warn("sampling: record skipped; further ones are only counted in pmu_sampling_errors_total", "reason", e.Reason, "err", e.Err)
			}
		}
		select {
		case <-govern.C:
			if err := g.step(); err != nil {
				return err
			}
		default:
		}
	}
	return nil
}

// ReadError is a record ReadAll skipped: Reason "decode" (a record its
// event's layout does not fit) or "ring" (a corrupt header, the rest of
// that ring's data dropped).
type ReadError struct {
	Reason string
	Err    error
}

// ReadAll drains every ring into the stats. Records that cannot be read
// are counted in the stats and skipped; it returns the first error of each
// ring and reason.
func (s *Sampler) ReadAll() []ReadError {
	var smp perfrecord.Sample
	var errs []ReadError
	b := s.stats.Lock()
	defer b.Unlock()
	for _, r := range s.rings {
		var decodeErr error
		_, err := r.Read(func(rec []byte) bool {
			if err := s.record(b, rec, &smp); err != nil {
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
	return errs
}

func (s *Sampler) record(b samplestat.Batch, rec []byte, smp *perfrecord.Sample) error {
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
		if err := perfrecord.DecodeSample(rec, s.events.Attrs[i].Layout(), smp); err != nil {
			return err
		}
		c := &s.cfgs[i]
		if c.SampleType&unix.PERF_SAMPLE_PERIOD == 0 {
			smp.Period = s.periods[i].Load() // the record stands for the period in force
		}
		b.Sample(i, smp, c.Memory, c.AddrOnly)
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

// SetPeriod sets event i's period on every CPU.
func (s *Sampler) SetPeriod(i int, period uint64) error {
	for _, fd := range s.fds[i] {
		p := period
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_PERIOD, uintptr(unsafe.Pointer(&p))); e != 0 {
			return fmt.Errorf("PERF_EVENT_IOC_PERIOD(%s, %d): %w", s.cfgs[i].Name, period, e)
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
	for _, r := range s.rings {
		errs = append(errs, r.Close())
	}
	s.rings = nil
	for _, fds := range s.fds {
		for _, fd := range fds {
			errs = append(errs, unix.Close(fd))
		}
	}
	s.fds = nil
	for _, fd := range s.leaders {
		errs = append(errs, unix.Close(fd))
	}
	s.leaders = nil
	if s.poller != nil {
		errs = append(errs, s.poller.Close())
		s.poller = nil
	}
	return errors.Join(errs...)
}
