// Package perfsample runs the sampling events of a plan on every CPU: it
// opens each event per CPU with the CPU's first event owning the ring
// buffer and the others writing into it (PERF_EVENT_IOC_SET_OUTPUT, one
// mmap per CPU however many events), reads the rings when the kernel wakes
// it or on a short timer, hands every record to samplestat, and applies
// the governor's periods with PERF_EVENT_IOC_PERIOD, all through
// collectors/perf, the sole owner of perf_event_open and its ioctls.
package perfsample

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/collectors/perf"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfring"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
	"github.com/pmu-exporter/pmu_exporter/comm/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/formats/spe"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// Options size the buffers and pace the reader.
type Options struct {
	Logger *slog.Logger // where skipped records and hotplug failures are reported (may be nil)
	// OnlineCPUs, when set, is polled with the governor to follow CPU
	// hotplug (Sync), and after each of Hotplug's events, at the next
	// wake (Poll at the latest).
	OnlineCPUs func() ([]int, error)
	Hotplug    <-chan cpuhotplug.Event
	Pages      int           // data pages per CPU ring (a power of two)
	Poll       time.Duration // longest wait between reads
	Govern     time.Duration // how often the governor runs
	Governor   sampling.Governor
	// Cgroup, if set, is a cgroup directory: the events then sample only its
	// tasks (perf's cgroup mode, as perf record -G), still one ring per CPU.
	Cgroup *os.File
	// AfterRead, if set, hears of each pass over the rings: how long it took
	// and how many records it skipped as bad.
	AfterRead func(took time.Duration, skipped int)
	// Decoder resolves the samples of Decode configs (the address sampler).
	Decoder *Decoder
	// WakeEach wakes the reader at every sample of Decode configs (the
	// watchpoints are armed from them) instead of once a page has filled.
	WakeEach bool
	// MIDR gives a CPU's MIDR_EL1, which says how its Arm SPE data
	// sources are encoded (nil, or 0: the cache events say the level).
	MIDR func(cpu int) uint64
	// AuxBytes is the AUX area of an AUX config (Arm SPE) on each CPU, in
	// bytes, rounded up to a power of two pages (0: DefaultAuxBytes).
	AuxBytes int
	// CgroupOf gives the cgroup id of a process, for the samples of AUX
	// configs that ask for cgroups (their records carry none); called
	// from the reader alone (cgroupid.Tasks).
	CgroupOf func(pid uint32) (uint64, bool)
}

// DefaultAuxBytes is each CPU's Arm SPE AUX area: at 64 bytes a record,
// 4,096 records, a chunk of a quarter of them per wakeup.
const DefaultAuxBytes = 256 << 10

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
	cpus    map[int]*cpuEvents
	order   []int // the CPUs of cpus, ascending
	poller  *perfring.Poller
	events  *perfrecord.Events
	stats   *samplestat.Stats
	periods []atomic.Uint64
	closeMu sync.Mutex

	resetMu  sync.Mutex
	resetReq []int // CPUs whose events to reopen at the next follow (ResetCPU)

	// clockOffset is CLOCK_MONOTONIC − perf's clock (ns), which moves an
	// AUX event's sample times onto the others' clock (perf.ClockOffset).
	clockOffset atomic.Int64
	// flushed is when the AUX events were last flushed (flushAux).
	flushed time.Time
}

// cpuEvents are one CPU's events and the ring they share, and the AUX
// events' own rings.
type cpuEvents struct {
	ring    *perfring.Ring // nil where only AUX events are open
	fds     []int          // per config; -1 where it is not open on this CPU
	ids     []uint64       // the kernel's id of each fd
	leaders []int
	aux     []*auxRing
}

// rings are the CPU's rings, the shared one first.
func (ce *cpuEvents) rings() []*perfring.Ring {
	var rs []*perfring.Ring
	if ce.ring != nil {
		rs = append(rs, ce.ring)
	}
	for _, a := range ce.aux {
		rs = append(rs, a.ring)
	}
	return rs
}

// auxRing is an AUX config's event on a CPU (Arm SPE), with a ring of its
// own: an AUX area is the mapping event's PMU's, and the event cannot
// share the CPU's ring (its records are on perf's clock, the others' on
// CLOCK_MONOTONIC, and the kernel joins no events of two clocks). Its
// data area carries the AUX records that announce its chunks and its
// CPU's context switches, which its Stream decodes.
type auxRing struct {
	cfg    int
	fd     int
	ring   *perfring.Ring
	area   auxArea // the ring's AUX area
	stream *spe.Stream
}

// auxArea is where the chunk an AUX record announces is read.
type auxArea interface {
	Aux(offset, size uint64) []byte
	AuxSize() int
}

const bitSampleIDAll = 1 << 18

// Open opens every config on each of its CPUs (cpus: the online ones).
// Configs that fail everywhere are reported and left out; Open fails only
// when nothing could be opened.
func Open(cfgs []sampling.Config, cpus []int, stats *samplestat.Stats, o Options) (*Sampler, []Failure, error) {
	s := &Sampler{opts: o, stats: stats, cfgs: cfgs, cpus: map[int]*cpuEvents{}}
	var err error
	if s.poller, err = perfring.NewPoller(); err != nil {
		return nil, nil, err
	}
	s.periods = make([]atomic.Uint64, len(cfgs))
	for i, c := range cfgs {
		s.periods[i].Store(c.Period)
	}
	var failures []Failure
	for _, cpu := range cpus {
		failures = append(failures, s.addCPU(cpu)...)
	}
	s.keepOpened()
	if len(s.cfgs) == 0 {
		s.Close()
		return nil, failures, fmt.Errorf("no sampling event could be opened on any CPU (%d failures)", len(failures))
	}
	if err := s.index(); err != nil {
		return nil, failures, errors.Join(err, s.Close())
	}
	if err := s.measureClock(); err != nil {
		return nil, failures, errors.Join(err, s.Close())
	}
	for _, cpu := range s.order {
		if err := s.enable(cpu); err != nil {
			return nil, failures, errors.Join(err, s.Close())
		}
	}
	return s, failures, nil
}

// clockEvery is how often the reader measures the clock offset again:
// the clocks part by 5 ms in it at NTP's fastest slew, by µs as NTP
// usually slews, and every SPE sample moves by the same offset.
const clockEvery = 10 * time.Second

// measureClock measures the clock offset that AUX events' sample times
// need, where any is open.
func (s *Sampler) measureClock() error {
	if !slices.ContainsFunc(s.cfgs, func(c sampling.Config) bool { return c.Aux }) {
		return nil
	}
	off, _, err := perf.ClockOffset()
	if err != nil {
		return fmt.Errorf("Arm SPE's sample times: %w", err)
	}
	s.clockOffset.Store(off)
	return nil
}

// addCPU opens the configs on cpu, disabled, the first one's ring shared by
// the others.
func (s *Sampler) addCPU(cpu int) []Failure {
	ce := &cpuEvents{fds: make([]int, len(s.cfgs)), ids: make([]uint64, len(s.cfgs))}
	var failures []Failure
	for i, c := range s.cfgs {
		ce.fds[i] = -1
		if c.CPUs != nil && !cpuset.Contains(c.CPUs, cpu) {
			continue
		}
		if c.Aux {
			a, err := s.openAux(i, cpu)
			if err != nil {
				failures = append(failures, Failure{Event: c.Name, CPU: cpu, Err: err})
				continue
			}
			ce.fds[i], ce.ids[i] = a.fd, a.id
			ce.aux = append(ce.aux, a.auxRing)
			continue
		}
		fd, leader, err := openOn(c, cpu, s.periods[i].Load(), s.opts.Cgroup, s.opts.WakeEach, s.opts.Pages, 0)
		if err == nil {
			err = s.attach(ce, fd)
			if err == nil {
				ce.ids[i], err = perf.ID(fd)
			}
			if err != nil {
				unix.Close(fd)
				if leader >= 0 {
					unix.Close(leader)
				}
			}
		}
		if err != nil {
			failures = append(failures, Failure{Event: c.Name, CPU: cpu, Err: err})
			continue
		}
		ce.fds[i] = fd
		if leader >= 0 {
			ce.leaders = append(ce.leaders, leader)
		}
	}
	if ce.ring != nil || len(ce.aux) > 0 {
		s.cpus[cpu] = ce
		s.order = append(s.order, cpu)
		slices.Sort(s.order)
	}
	return failures
}

// openedAux is an AUX event opened on a CPU, with its id.
type openedAux struct {
	*auxRing
	id uint64
}

// openAux opens AUX config i on cpu, disabled, with its ring and AUX area,
// and the decoding of its records.
func (s *Sampler) openAux(i, cpu int) (openedAux, error) {
	c := s.cfgs[i]
	fd, _, err := openOn(c, cpu, s.periods[i].Load(), s.opts.Cgroup, false, s.opts.Pages, s.opts.AuxBytes)
	if errors.Is(err, unix.EBUSY) {
		return openedAux{}, fmt.Errorf("%w: another tool holds %s on this CPU (a trace PMU admits one event per CPU: perf record -e %s//, say)", err, c.PMU, c.PMU)
	}
	if err != nil {
		return openedAux{}, err
	}
	a := &auxRing{cfg: i, fd: fd}
	fail := func(err error) (openedAux, error) {
		if a.ring != nil {
			a.ring.Close()
		}
		unix.Close(fd)
		return openedAux{}, err
	}
	if a.ring, err = perfring.Open(fd, s.opts.Pages); err != nil {
		return fail(err)
	}
	if err := a.ring.MapAux(auxPages(s.opts.AuxBytes)); err != nil {
		return fail(fmt.Errorf("%s on CPU %d: %w", c.Name, cpu, err))
	}
	tc, ok := a.ring.TimeConv()
	if !ok {
		return fail(fmt.Errorf("%s on CPU %d: the kernel offers no conversion of the CPU's timer to perf time (cap_user_time_zero clear), without which its records' times are unknown", c.Name, cpu))
	}
	id, err := perf.ID(fd)
	if err != nil {
		return fail(err)
	}
	if err := s.poller.Add(a.ring); err != nil {
		return fail(err)
	}
	a.area, a.stream = a.ring, &spe.Stream{CPU: uint32(cpu), TC: tc}
	if s.opts.MIDR != nil {
		a.stream.MIDR = s.opts.MIDR(cpu)
	}
	return openedAux{a, id}, nil
}

// auxPages is bytes of AUX area in pages: a power of two, at least two
// (the SPE driver's least).
func auxPages(bytes int) int {
	if bytes <= 0 {
		bytes = DefaultAuxBytes
	}
	page := os.Getpagesize()
	n := 2
	for n*page < bytes {
		n *= 2
	}
	return n
}

// keepOpened leaves out the configs no CPU could open.
func (s *Sampler) keepOpened() {
	var keep []int
	for i := range s.cfgs {
		for _, ce := range s.cpus {
			if ce.fds[i] >= 0 {
				keep = append(keep, i)
				break
			}
		}
	}
	if len(keep) == len(s.cfgs) {
		return
	}
	cfgs := make([]sampling.Config, len(keep))
	periods := make([]atomic.Uint64, len(keep))
	for k, i := range keep {
		cfgs[k] = s.cfgs[i]
		periods[k].Store(s.periods[i].Load())
	}
	for _, ce := range s.cpus {
		fds, ids := make([]int, len(keep)), make([]uint64, len(keep))
		for k, i := range keep {
			fds[k], ids[k] = ce.fds[i], ce.ids[i]
		}
		ce.fds, ce.ids = fds, ids
	}
	s.cfgs, s.periods = cfgs, periods
}

// index rebuilds the id → event mapping from the open fds.
func (s *Sampler) index() error {
	attrs := make([]perfrecord.Attr, len(s.cfgs))
	ids := make([][]uint64, len(s.cfgs))
	for i, c := range s.cfgs {
		attrs[i] = perfrecord.Attr{Type: c.Attr.Type, Config: c.Attr.Config, Period: c.Period, SampleType: c.SampleType, SampleIDAll: true, RegsUser: c.RegsUser}
		for _, cpu := range s.order {
			if ce := s.cpus[cpu]; ce.fds[i] >= 0 {
				ids[i] = append(ids[i], ce.ids[i])
			}
		}
	}
	ev, err := perfrecord.NewEvents(attrs, ids)
	if err != nil {
		return err
	}
	s.events = ev
	return nil
}

func (s *Sampler) enable(cpu int) error {
	for _, fd := range s.cpus[cpu].fds {
		if fd >= 0 {
			if err := perf.Enable(fd); err != nil {
				return fmt.Errorf("enabling a sampling event on CPU %d: %w", cpu, err)
			}
		}
	}
	return nil
}

// Sync follows CPU hotplug: the events of CPUs no longer online are read
// one last time and closed, and CPUs that came online get the events, at
// the periods now in force.
func (s *Sampler) Sync(online []int) ([]Failure, error) {
	changed := false
	for _, cpu := range slices.Clone(s.order) {
		if !slices.Contains(online, cpu) {
			s.drain(s.cpus[cpu])
			s.closeCPU(cpu)
			changed = true
		}
	}
	var failures []Failure
	for _, cpu := range online {
		if _, ok := s.cpus[cpu]; !ok {
			failures = append(failures, s.addCPU(cpu)...)
			changed = changed || s.cpus[cpu] != nil
		}
	}
	if !changed {
		return failures, nil
	}
	if err := s.index(); err != nil {
		return failures, err
	}
	for _, cpu := range online {
		if ce := s.cpus[cpu]; ce != nil {
			if err := s.enable(cpu); err != nil {
				return failures, err
			}
		}
	}
	return failures, nil
}

// ResetCPU makes the reader reopen cpu's events at its next hotplug check:
// a CPU that went offline and back between two checks keeps its old events,
// detached by the kernel, which never sample again. The counting engine
// finds such CPUs (perfcount.Options.OnCPUReset). Safe from any goroutine.
func (s *Sampler) ResetCPU(cpu int) {
	s.resetMu.Lock()
	defer s.resetMu.Unlock()
	s.resetReq = append(s.resetReq, cpu)
}

// reset closes the CPUs ResetCPU named, after a last read, so that the
// Sync that follows opens them afresh.
func (s *Sampler) reset() {
	s.resetMu.Lock()
	cpus := s.resetReq
	s.resetReq = nil
	s.resetMu.Unlock()
	for _, cpu := range cpus {
		if ce := s.cpus[cpu]; ce != nil {
			s.drain(ce)
			s.closeCPU(cpu)
		}
	}
}

// follow syncs with the online CPUs, where Options say how to list them.
func (s *Sampler) follow() error {
	if s.opts.OnlineCPUs == nil {
		return nil
	}
	online, err := s.opts.OnlineCPUs()
	if err != nil {
		return nil // the list is unreadable now: keep what is open
	}
	s.reset()
	failures, err := s.Sync(online)
	for _, f := range failures {
		if s.opts.Logger != nil {
			s.opts.Logger.Warn("sampling event not opened on a CPU that came online", "event", f.Event, "cpu", f.CPU, "err", f.Err)
		}
	}
	return err
}

// closeCPU closes a CPU's events and ring.
func (s *Sampler) closeCPU(cpu int) error {
	ce := s.cpus[cpu]
	var errs []error
	for _, r := range ce.rings() {
		if s.poller != nil {
			errs = append(errs, s.poller.Remove(r))
		}
		errs = append(errs, r.Close())
	}
	for _, fd := range ce.fds {
		if fd >= 0 {
			errs = append(errs, unix.Close(fd))
		}
	}
	for _, fd := range ce.leaders {
		errs = append(errs, unix.Close(fd))
	}
	delete(s.cpus, cpu)
	s.order = slices.DeleteFunc(s.order, func(c int) bool { return c == cpu })
	return errors.Join(errs...)
}

// openOn opens c on cpu at period, disabled, after its leader when it has
// one; for cgroup's tasks alone when cgroup is set. An AUX config's ring
// has dataPages data pages and an AUX area of auxBytes.
func openOn(c sampling.Config, cpu int, period uint64, cgroup *os.File, wakeEach bool, dataPages, auxBytes int) (fd, leader int, err error) {
	leader = -1
	pid, flags := -1, unix.PERF_FLAG_FD_CLOEXEC
	if cgroup != nil {
		pid, flags = int(cgroup.Fd()), flags|unix.PERF_FLAG_PID_CGROUP
	}
	if c.Leader != nil {
		la := perf.Attr(*c.Leader)
		la.Read_format = 0
		la.Bits |= unix.PerfBitDisabled
		if leader, err = perf.OpenFD(&la, pid, cpu, -1, flags); err != nil {
			return -1, -1, perf.NewOpenError(c.Name+"'s leader", cpu, err)
		}
	}
	a := perf.Attr(c.Attr)
	a.Read_format = 0
	a.Sample = period
	a.Sample_type = c.SampleType
	a.Sample_regs_user = c.RegsUser
	a.Bits |= unix.PerfBitDisabled | bitSampleIDAll | unix.PerfBitWatermark
	if c.Decode {
		// exec's COMM records tell the decoder a process's code changed, and
		// MMAP2 records of executable mappings that a range was remapped.
		a.Bits |= unix.PerfBitComm | unix.PerfBitCommExec | unix.PerfBitMmap | unix.PerfBitMmap2
	}
	if c.Decode && !c.Aux {
		// Times on CLOCK_MONOTONIC, as the watchpoints' traps: the reader
		// compares them with its own clock (the arm latency). An AUX
		// event's stay on perf's clock, the one its records' timer counts
		// convert to: the reader moves them (ClockOffset).
		a.Bits |= unix.PerfBitUseClockID
		a.Clockid = unix.CLOCK_MONOTONIC
	}
	if c.Aux {
		// CPU-wide switches: whose records a chunk holds. Wake the reader
		// at each quarter of the AUX area: a chunk waits no longer.
		a.Bits |= unix.PerfBitContextSwitch
		a.Aux_watermark = uint32(auxPages(auxBytes) * os.Getpagesize() / 4)
	}
	a.Wakeup = 4096 // bytes: wake the reader once a page has filled
	if c.Aux {
		// Its data area holds the CPU's switch records, which need no
		// prompt reading: wake at half of it.
		a.Wakeup = uint32(dataPages * os.Getpagesize() / 2)
	}
	if c.Decode && wakeEach {
		// Watchpoints are armed from the samples: wake at each one, so that
		// an arm follows its sample by the reader's reaction, not a page.
		a.Bits &^= unix.PerfBitWatermark
		a.Wakeup = 1
	}
	fd, err = perf.OpenFD(&a, pid, cpu, leader, flags)
	if err != nil {
		if leader >= 0 {
			unix.Close(leader)
		}
		return -1, -1, fmt.Errorf("sampling every %d: %w", period, perf.NewOpenError(c.Name, cpu, err))
	}
	if leader >= 0 {
		// A disabled leader holds its member off: it would never sample.
		if err := perf.Enable(leader); err != nil {
			unix.Close(fd)
			unix.Close(leader)
			return -1, -1, fmt.Errorf("%s: enable its leader on CPU %d: %w", c.Name, cpu, err)
		}
	}
	return fd, leader, nil
}

// attach gives fd the CPU's ring: a new one for the CPU's first event,
// else the first event's through SET_OUTPUT.
func (s *Sampler) attach(ce *cpuEvents, fd int) error {
	if ce.ring != nil {
		return perf.SetOutput(fd, ce.ring.FD())
	}
	r, err := perfring.Open(fd, s.opts.Pages)
	if err != nil {
		return err
	}
	if err := s.poller.Add(r); err != nil {
		r.Close()
		return err
	}
	ce.ring = r
	return nil
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
	measured := time.Now() // Open measured the clock offset
	for ctx.Err() == nil {
		if _, err := s.poller.Wait(int(poll / time.Millisecond)); err != nil {
			return err
		}
		// A bad record is counted (pmu_sampling_errors_total) and skipped;
		// the first of each kind is logged.
		start := time.Now()
		skipped := s.ReadAll()
		if s.opts.AfterRead != nil {
			s.opts.AfterRead(time.Since(start), len(skipped))
		}
		for _, e := range skipped {
			if !logged[e.Reason] && s.opts.Logger != nil {
				logged[e.Reason] = true
				s.opts.Logger.Warn("sampling: record skipped; further ones are only counted in pmu_sampling_errors_total", "reason", e.Reason, "err", e.Err)
			}
		}
		select {
		case <-govern.C:
			if err := s.follow(); err != nil {
				return err
			}
			// The clocks drift apart (NTP slews CLOCK_MONOTONIC only, by
			// 500 ppm at most): measured again every clockEvery.
			if time.Since(measured) >= clockEvery {
				measured = time.Now()
				if err := s.measureClock(); err != nil && !logged["clock"] && s.opts.Logger != nil {
					logged["clock"] = true
					s.opts.Logger.Warn("sampling: clock offset not measured again; the last one stays", "err", err)
				}
			}
			if err := g.step(); err != nil {
				return err
			}
		case <-s.opts.Hotplug:
			if err := s.follow(); err != nil {
				return err
			}
		default:
		}
	}
	return nil
}

// ReadError is a record ReadAll skipped: Reason "decode" (a record its
// event's layout does not fit) or "ring" (a corrupt header, the rest of
// that ring's data dropped); or "aux", an AUX event that could not be
// stopped and started (its records not flushed, or the event left
// stopped after its area filled).
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
	cut, ok := monotonicNow() // what any ring can hold by the time it is read
	if !ok {
		cut = math.MaxUint64 // unreadable: nothing waits
	}
	if time.Since(s.flushed) >= max(s.opts.Poll, time.Millisecond) {
		// Not at every wake: a ring woken by its switch records alone
		// must not stop every CPU's unit.
		errs = append(errs, s.flushAux(b)...)
		s.flushed = time.Now()
	}
	for _, cpu := range s.order {
		errs = append(errs, s.readCPU(b, s.cpus[cpu], &smp)...)
	}
	if d := s.opts.Decoder; d != nil {
		d.flush(b, cut) // after every ring: it merges them by time
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
func (s *Sampler) flushAux(b samplestat.Batch) []ReadError {
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
func (s *Sampler) readCPU(b samplestat.Batch, ce *cpuEvents, smp *perfrecord.Sample) []ReadError {
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
func (s *Sampler) auxRecord(b samplestat.Batch, a *auxRing, rec []byte, smp *perfrecord.Sample) (perfrecord.Aux, bool, error) {
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
			s.deliver(b, a.cfg, sm)
		})
		return aux, true, nil
	}
	return perfrecord.Aux{}, false, s.record(b, rec, smp)
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
		if s.cfgs[i].SampleType&unix.PERF_SAMPLE_PERIOD == 0 {
			smp.Period = s.periods[i].Load() // the record stands for the period in force
		}
		s.deliver(b, i, smp)
	case perfrecord.TypeMmap, perfrecord.TypeMmap2:
		if d := s.opts.Decoder; d != nil {
			if m, err := perfrecord.DecodeMmap(rec); err == nil {
				d.mapped(m)
			}
		}
	case perfrecord.TypeComm:
		if d := s.opts.Decoder; d != nil && h.Misc&unix.PERF_RECORD_MISC_COMM_EXEC != 0 {
			if c, err := perfrecord.DecodeComm(rec); err == nil && c.PID == c.TID {
				d.exec(c.PID)
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

// deliver takes a sample of config i: to the address sampler's decoder
// where the config is one of its (a precise sample with the width its
// instruction gives, or a timer sample resolved from its registers), else
// to the stats as it is.
func (s *Sampler) deliver(b samplestat.Batch, i int, smp *perfrecord.Sample) {
	c := &s.cfgs[i]
	d := s.opts.Decoder
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

// drain reads a CPU's rings into the stats (a CPU about to be closed).
func (s *Sampler) drain(ce *cpuEvents) {
	var smp perfrecord.Sample
	b := s.stats.Lock()
	defer b.Unlock()
	s.readCPU(b, ce, &smp) // its errors are counted in the stats
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
