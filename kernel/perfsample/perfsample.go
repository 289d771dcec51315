// Package perfsample runs the sampling events of a plan on every CPU: it
// opens each event per CPU with the CPU's first event owning the ring
// buffer and the others writing into it (PERF_EVENT_IOC_SET_OUTPUT, one
// mmap per CPU however many events), reads the rings when the kernel wakes
// it or on a short timer, hands every record to samplestat, and applies
// the governor's periods with PERF_EVENT_IOC_PERIOD, all through
// kernel/perf, the sole owner of perf_event_open and its ioctls.
package perfsample

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/formats/spe"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
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
	// BeginPass, if set, hears that a pass (the rings' read, and the
	// following and governing after it) begins; the function it returns,
	// that it has ended. A pass that never ends (a read of a sampled
	// binary hung in the kernel) is then seen (exporter.Health.Stuck).
	BeginPass func() (end func())
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
	sink    Consumer
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
func Open(cfgs []sampling.Config, cpus []int, sink Consumer, o Options) (*Sampler, []Failure, error) {
	s := &Sampler{opts: o, sink: sink, cfgs: cfgs, cpus: map[int]*cpuEvents{}}
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
				perf.CloseFD(fd)
				if leader >= 0 {
					perf.CloseFD(leader)
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
		perf.CloseFD(fd)
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
			errs = append(errs, perf.CloseFD(fd))
		}
	}
	for _, fd := range ce.leaders {
		errs = append(errs, perf.CloseFD(fd))
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
			perf.CloseFD(leader)
		}
		return -1, -1, fmt.Errorf("sampling every %d: %w", period, perf.NewOpenError(c.Name, cpu, err))
	}
	if leader >= 0 {
		// A disabled leader holds its member off: it would never sample.
		if err := perf.Enable(leader); err != nil {
			perf.CloseFD(fd)
			perf.CloseFD(leader)
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
	r := &running{g: newGoverning(s), logged: map[string]bool{}, measured: time.Now() /* Open measured the clock offset */, govern: govern.C}
	for ctx.Err() == nil {
		if _, err := s.poller.Wait(int(poll / time.Millisecond)); err != nil {
			return err
		}
		end := func() {}
		if s.opts.BeginPass != nil {
			end = s.opts.BeginPass()
		}
		err := s.pass(r)
		end()
		if err != nil {
			return err
		}
	}
	return nil
}

// running is what Run keeps from one pass to the next.
type running struct {
	g        *governing
	logged   map[string]bool // the kinds of skipped records logged
	measured time.Time       // when the clock offset was last measured
	govern   <-chan time.Time
}

// pass reads every ring once and, when it is time, follows the online
// CPUs and governs the periods.
func (s *Sampler) pass(r *running) error {
	// A bad record is counted (pmu_sampling_errors_total) and skipped;
	// the first of each kind is logged.
	start := time.Now()
	skipped := s.ReadAll()
	if s.opts.AfterRead != nil {
		s.opts.AfterRead(time.Since(start), len(skipped))
	}
	for _, e := range skipped {
		if !r.logged[e.Reason] && s.opts.Logger != nil {
			r.logged[e.Reason] = true
			s.opts.Logger.Warn("sampling: record skipped; further ones are only counted in pmu_sampling_errors_total", "reason", e.Reason, "err", e.Err)
		}
	}
	select {
	case <-r.govern:
		if err := s.follow(); err != nil {
			return err
		}
		// The clocks drift apart (NTP slews CLOCK_MONOTONIC only, by
		// 500 ppm at most): measured again every clockEvery.
		if time.Since(r.measured) >= clockEvery {
			r.measured = time.Now()
			if err := s.measureClock(); err != nil && !r.logged["clock"] && s.opts.Logger != nil {
				r.logged["clock"] = true
				s.opts.Logger.Warn("sampling: clock offset not measured again; the last one stays", "err", err)
			}
		}
		return r.g.step()
	case <-s.opts.Hotplug:
		return s.follow()
	default:
		return nil
	}
}
