// Package feed resolves the address sampler's samples to accesses and
// feeds them, in time order, to the line table (samplestat), ComDetective's
// detector and trap path (comdetect), ReuseTracker (reuse), the watchpoint
// budget (watchbudget) and the folding by last-level cache domain. What the
// kernel gives it comes in as plain values through three doors that
// kernel/ opens and collector/ wires: the ring's records (Sink, which
// kernel/perfsample's sampler hands them to), what the sampled processes
// map (Processes), and the watched threads' debug registers (Watchpoints).
package feed

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/watchbudget"
	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/codemap"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Processes reads what the sampled processes map
// (kernel/perfsample.Processes): each open and read bounded in time.
type Processes interface {
	Open(pid uint32, name string) (codemap.File, string, error)
	ReadMem(pid uint32, addr uint64, b []byte) (int, error)
	Maps(pid uint32) ([]addrmap.Mapping, error)
	Comm(pid uint32) (string, error)
	TimedOut() uint64 // opens and reads given up on
}

// Watchpoints are the watched threads' debug registers
// (kernel/watch.Engine): their events added and removed, slots armed and
// disarmed, the arms flushed, traps and the leaders' samples read, and
// each thread's distance clock.
type Watchpoints interface {
	Add(tid uint32) error
	AddCounting(tid uint32) error
	Remove(tid uint32)
	Watching(tid uint32) bool
	NumThreads() int
	Slots() int
	Arm(tid uint32, slot int, addr uint64, size uint8, writesOnly bool) error
	Disarm(tid uint32, slot int) error
	Flush() error
	Wait(timeout time.Duration) error
	Clock(tid uint32) (uint64, error)
	SamplePeriod() uint64
	SampleEvery(period uint64) error
	ReadSampled(trap func(memop.Trap), sampled func(memop.Sampled)) (bad int, lost uint64)
}

// Decoder resolves the address sampler's timer samples to accesses by
// decoding the sampled instruction, read from the process's memory with
// its function found in the mapped ELF file (Processes), and feeds them,
// in time order, to the shared line table and ComDetective's detector.
type Decoder struct {
	procs    Processes
	now      func() (uint64, bool) // CLOCK_MONOTONIC ns, the samples' clock
	maps     *addrmap.Maps
	code     *codemap.Map
	resolver *memop.Resolver
	// pending and the slices beside it are the reader's: touched only in
	// ReadAll and drain, under the stats' batch lock, which the samplers
	// sharing a decoder (one per selected cgroup) also share.
	pending []memaccess.Access
	cgroups []uint64 // beside pending: the sample's cgroup (has: cgroupSet)
	hasCg   []bool
	evs     []int
	tabled  []bool // a precise sample the table already took (Batch.Precise)

	order []int                     // flush's time order, kept between passes
	kinds []cacheline.Kind          // what the detector found, by order
	fed   func(a *memaccess.Access) // tests: each access as the detector takes it

	// mu guards the detector, the resolver, the code map and the domain
	// matrix, which the reader changes and /debug/comm and the metrics read.
	mu  sync.Mutex
	det *comdetect.Detector
	// domains are the last-level cache domain of each CPU, and the
	// communication between domains by (reader's, publisher's) pair.
	domainOf func(cpu int) (string, bool)
	domains  map[DomainPair]*comdetect.Cell

	// The watchpoints, where Watch or WatchReuse (or both) turned them on:
	// one engine, each watched process's registers serving ComDetective's
	// trap path (the watcher) or, where reusing, its ReuseTracker.
	engine  Watchpoints
	watcher *comdetect.Watcher
	watched map[uint32][]uint32 // pid → its watched threads
	reusing map[uint32]bool     // the watched pids whose registers serve ReuseTracker
	lastOf  map[[2]uint32]int   // flush: each thread's last sample of the batch
	// ReuseTracker on the watchpoints (WatchReuse).
	trackers    map[uint32]*reuse.Tracker
	reuseCgroup map[uint32]uint64
	reuseGone   map[uint64]*reuse.Tracker // per cgroup: the totals of processes gone
	reuseSlots  int
	reuseOwn    int // each thread's slots for its own watches (private mode)
	reuseMode   reuse.Mode
	// ownClock: the trackers take their samples from the engine's leaders
	// (each watched thread sampled on its own clock), not from the
	// address sampler's; reuseResolver decodes those and the traps, with
	// counts of its own; reuseEvents names the events the engine counts as
	// the distance clock ("": time), and pendingReuse is ReadTraps'
	// scratch.
	ownClock      bool
	reuseResolver *memop.Resolver
	reuseEvents   string
	pendingReuse  []reuseEvent
	// threadCPU is where each watched thread was last seen (a sample or a
	// trap), and domainIDs numbers the last-level cache domains: a
	// thread's cache domain in ReuseTracker's shared mode.
	threadCPU                              map[uint32]uint32
	domainIDs                              map[string]int
	traps, trapUnresolved, trapsLost, arms uint64
	reuseTraps                             uint64 // of traps: ReuseTracker's
	// maxWatched > 0: threads are given events at their first sample
	// (WatchNewThreads), up to that many; joined counts them.
	maxWatched int
	joined     uint64
	// armedAt are the times of the pass's samples that armed a reuse slot,
	// and armLatencies how long after its sample each arm took effect,
	// by log2 bin of ReuseClock units: a reuse sooner than that is missed
	// and the next one seen instead.
	armedAt      []uint64
	armLatencies [reuse.Bins]uint64
	// gov keeps each watched process's traps within its budget (nil: no
	// limit).
	gov *watchbudget.Budget
	// cacheBytes bounds what each resolver keeps of decoded code.
	cacheBytes int
}

// NewDecoder reads the sampled processes through procs; now reads the
// samples' clock (kernel/perfsample.MonotonicNow).
func NewDecoder(procs Processes, now func() (uint64, bool), det *comdetect.Detector) (*Decoder, error) {
	d := &Decoder{procs: procs, now: now, maps: addrmap.New(), det: det, domains: map[DomainPair]*comdetect.Cell{}, cacheBytes: memop.DefaultCacheBytes}
	d.code = codemap.New(d.maps, procs.Open, procs.ReadMem)
	var err error
	if d.resolver, err = memop.NewResolver(d, runtime.GOARCH); err != nil {
		return nil, fmt.Errorf("address sampler: %w", err)
	}
	return d, nil
}

// Observe calls fed with each access as the detector takes it (tests).
func (d *Decoder) Observe(fed func(a *memaccess.Access)) { d.fed = fed }

// Text implements memop.Code: it reads pid's mappings when ip lies in none
// known (a new process, or a new mapping).
func (d *Decoder) Text(pid uint32, ip uint64, buf []byte) (uint64, []byte, memop.Reason) {
	if _, ok := d.maps.Find(pid, ip); !ok && ip < 0xffff800000000000 {
		if m, err := d.procs.Maps(pid); err == nil {
			d.maps.Set(pid, m)
			d.code.Forget(pid)
		}
		if name, err := d.procs.Comm(pid); err == nil {
			d.det.SetName(pid, pid, name)
		}
	}
	return d.code.Text(pid, ip, buf)
}

// Mapped follows a new executable mapping: what was decoded in its range
// is stale.
func (d *Decoder) Mapped(m perfrecord.Mmap) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.maps.Has(m.PID) {
		d.maps.Add(m.PID, addrmap.Mapping{Start: m.Addr, End: m.Addr + m.Len, PgOff: m.PgOff, Name: m.Filename})
	}
	d.resolver.Unmap(m.PID, m.Addr, m.Addr+m.Len)
	if d.reuseResolver != nil {
		d.reuseResolver.Unmap(m.PID, m.Addr, m.Addr+m.Len)
	}
}

// Exited forgets a process that is gone.
func (d *Decoder) Exited(pid uint32) { d.exec(pid) }

// ThreadsExited forgets threads of pid that are gone while the process
// lives on: their rows of its matrices and what the watcher kept of them.
func (d *Decoder) ThreadsExited(pid uint32, tids []uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.det.ForgetThreads(pid, tids)
	if d.watcher != nil {
		d.watcher.ForgetThreads(pid, tids)
	}
}

// CloseIdleCode closes the mapped files that no process known to the
// decoder maps any more.
func (d *Decoder) CloseIdleCode() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.code.CloseIdle()
}

// exec forgets what was known of a process that ran a new program.
func (d *Decoder) exec(pid uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.engine != nil {
		d.unwatch(pid)
		if d.gov != nil {
			d.gov.Forget(pid)
		}
	}
	d.resolver.Forget(pid)
	if d.reuseResolver != nil {
		d.reuseResolver.Forget(pid)
	}
	d.code.Forget(pid)
	d.maps.Forget(pid)
	d.det.Forget(pid)
}

// unwatch closes the watchpoint events of pid's threads and forgets what
// its registers served: its tracker's armed watches end (Ended, where
// their owners' clocks can be read), its totals join its cgroup's of
// processes gone; the watcher's state of it goes.
func (d *Decoder) unwatch(pid uint32) {
	if t := d.trackers[pid]; t != nil {
		// Its armed watches end with it, aged on their owners' clocks
		// while their events can still be read (a thread's count stays
		// readable after it exits): its accesses are never reused.
		t.Finish()
	}
	for _, tid := range d.watched[pid] {
		d.engine.Remove(tid)
		delete(d.threadCPU, tid)
	}
	delete(d.watched, pid)
	delete(d.reusing, pid)
	if t := d.trackers[pid]; t != nil {
		cg := d.reuseCgroup[pid]
		if d.reuseGone[cg] == nil {
			d.reuseGone[cg] = reuse.New(nil, reuse.Options{Mode: d.reuseMode, Clock: d.reuseClockName()})
		}
		d.reuseGone[cg].Merge(t)
	}
	delete(d.trackers, pid)
	delete(d.reuseCgroup, pid)
	if d.watcher != nil {
		d.watcher.Forget(pid)
	}
}

// queue holds a resolved access of event ev until the pass's flush.
func (d *Decoder) queue(a memaccess.Access, s *perfrecord.Sample, ev int, tabled bool) {
	d.pending = append(d.pending, a)
	d.cgroups = append(d.cgroups, s.Cgroup)
	d.hasCg = append(d.hasCg, s.Has&unix.PERF_SAMPLE_CGROUP != 0)
	d.evs = append(d.evs, ev)
	d.tabled = append(d.tabled, tabled)
}

// flush feeds the accesses of one pass over all the rings, up to time cut
// (CLOCK_MONOTONIC, read before the pass), in time order; later ones wait
// for the next pass. Alg. 1 detects a reader's sample on a line whose last
// sampled store was another thread's, so the rings must be merged by time:
// fed ring by ring, one CPU's run of samples would hide the others',
// leaving about one detection per line and ring. Each ring is in order,
// the rings are not with each other, and a ring read late in a pass (the
// pass decoded a new program's code first, say) holds samples newer than
// any the rings read before it could: those wait, so that the next pass
// merges them with the earlier rings' samples of the same time.
func (d *Decoder) flush(b samplestat.Batch, cut uint64) {
	if len(d.pending) == 0 {
		return
	}
	d.order = d.order[:0]
	for i := range d.pending {
		d.order = append(d.order, i)
	}
	slices.SortFunc(d.order, func(a, b int) int { return cmp.Compare(d.pending[a].Time, d.pending[b].Time) })
	n, _ := slices.BinarySearchFunc(d.order, cut, func(i int, cut uint64) int {
		if d.pending[i].Time <= cut {
			return -1
		}
		return 1
	})
	ready := d.order[:n]
	d.kinds = d.kinds[:0]
	d.mu.Lock()
	if d.watcher != nil || d.trackers != nil {
		clear(d.lastOf)
		for k, i := range ready {
			d.lastOf[[2]uint32{d.pending[i].PID, d.pending[i].TID}] = k
		}
	}
	for k, i := range ready {
		a := &d.pending[i]
		if d.fed != nil {
			d.fed(a)
		}
		var found comdetect.Detection
		if d.threadCPU != nil && d.watched[a.PID] != nil {
			d.threadCPU[a.TID] = a.CPU
		}
		// The watch budget is asked only for a sample that would arm (not,
		// in private reuse, the address sampler's: the leaders' arm).
		watched := d.watched[a.PID] != nil
		if watched && d.maxWatched > 0 && d.lastOf[[2]uint32{a.PID, a.TID}] == k {
			d.join(a.PID, a.TID)
		}
		if watched && d.reusing[a.PID] {
			found = d.det.Add(a)
			if !d.ownClock && (d.gov == nil || d.gov.Allow(a.PID)) && d.tracker(a.PID).Sample(reuseUse(a, ReuseClock(a.Time))) {
				d.armedAt = append(d.armedAt, a.Time)
			}
			if d.hasCg[i] {
				d.reuseCgroup[a.PID] = d.cgroups[i]
			}
		} else if watched && (d.gov == nil || d.gov.Allow(a.PID)) {
			found = d.watcher.Sampled(a, d.lastOf[[2]uint32{a.PID, a.TID}] == k)
		} else {
			found = d.det.Add(a)
		}
		d.kinds = append(d.kinds, found.Kind)
		if found.Kind != cacheline.NotShared && a.CPU != found.PeerCPU {
			d.foldDomains(a.CPU, found.PeerCPU, a.Period, found.Kind)
		}
	}
	d.mu.Unlock()
	for k, i := range ready {
		if d.tabled[i] {
			b.Detected(&d.pending[i], d.cgroups[i], d.hasCg[i], d.kinds[k])
		} else {
			b.Access(d.evs[i], &d.pending[i], d.cgroups[i], d.hasCg[i], d.kinds[k])
		}
	}
	if d.engine != nil {
		d.mu.Lock()
		d.engine.Flush() // the pass's arms, in effect now
		d.armLatency(d.armedAt)
		d.armedAt = d.armedAt[:0]
		d.mu.Unlock()
	}
	d.keep(d.order[n:])
}

// keep leaves only the pending accesses at indexes later, in that order.
func (d *Decoder) keep(later []int) {
	m := len(d.pending)
	for _, i := range later {
		d.pending = append(d.pending, d.pending[i])
		d.cgroups = append(d.cgroups, d.cgroups[i])
		d.hasCg = append(d.hasCg, d.hasCg[i])
		d.evs = append(d.evs, d.evs[i])
		d.tabled = append(d.tabled, d.tabled[i])
	}
	k := copy(d.pending, d.pending[m:])
	copy(d.cgroups, d.cgroups[m:])
	copy(d.hasCg, d.hasCg[m:])
	copy(d.evs, d.evs[m:])
	copy(d.tabled, d.tabled[m:])
	d.pending, d.cgroups, d.hasCg, d.evs, d.tabled = d.pending[:k], d.cgroups[:k], d.hasCg[:k], d.evs[:k], d.tabled[:k]
}

// DomainPair is two last-level cache domains, A <= B.
type DomainPair struct{ A, B string }

// SetDomains gives the last-level cache domain of each CPU
// (host.LLCDomains.Of; false where it cannot place the CPU now):
// communication between CPUs is then also folded by domain pair.
func (d *Decoder) SetDomains(of func(cpu int) (string, bool)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.domainOf = of
}

// domain names cpu's last-level cache domain: the CPU itself where no
// domains are set or they cannot place it.
func (d *Decoder) domain(cpu uint32) string {
	if d.domainOf != nil {
		if name, ok := d.domainOf(int(cpu)); ok {
			return name
		}
	}
	return strconv.Itoa(int(cpu))
}

func (d *Decoder) foldDomains(cpu, peer uint32, period uint64, kind cacheline.Kind) {
	a, b := d.domain(cpu), d.domain(peer)
	if a > b {
		a, b = b, a
	}
	c := d.domains[DomainPair{a, b}]
	if c == nil {
		c = &comdetect.Cell{}
		d.domains[DomainPair{a, b}] = c
	}
	c.Add(period, kind == cacheline.TrueSharing)
}

// Domains calls f with each domain pair's communication (a <= b).
func (d *Decoder) Domains(f func(a, b string, c comdetect.Cell)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, c := range d.domains {
		f(p.A, p.B, *c)
	}
}

// SetDecodeCache bounds what each of the decoder's resolvers (the
// address sampler's, and ReuseTracker's where it runs) keeps of decoded
// code to about n bytes.
func (d *Decoder) SetDecodeCache(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cacheBytes = n
	d.resolver.SetCacheBytes(n)
	if d.reuseResolver != nil {
		d.reuseResolver.SetCacheBytes(n)
	}
}

// SetSymbolBudget bounds what the decoder keeps of the sampled binaries'
// symbol tables, line tables and Go pclntabs to about n bytes
// (codemap.Map.SetBudget): a process declares a symbol table of any size.
func (d *Decoder) SetSymbolBudget(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.code.SetBudget(n)
}

// View runs f with the detector and the resolver's counts held still;
// the decode cache's size and evictions are both resolvers'.
func (d *Decoder) View(f func(det *comdetect.Detector, out memop.Outcomes)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.resolver.Outcomes()
	out.SymbolBytes, out.SymbolsRefused = d.code.Bytes(), d.code.Refused()
	out.ReadsTimedOut = d.procs.TimedOut()
	if d.reuseResolver != nil {
		out.CacheBytes += d.reuseResolver.CacheBytes()
		out.Evicted += d.reuseResolver.Evicted
	}
	f(d.det, out)
}

// Resolve resolves one sample to the access it made as the address
// sampler does (its instruction decoded, its address computed from the
// sample's registers): the sampler validation judges the same decoder.
func (d *Decoder) Resolve(s *perfrecord.Sample) (memaccess.Access, memop.Reason) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resolver.Sample(s, 1)
}

// Symbolize names an instruction of pid.
func (d *Decoder) Symbolize(pid uint32, ip uint64) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.code.Symbolize(pid, ip).String()
}

// watchBackend arms ComDetective's watchpoints through the engine.
type watchBackend struct{ d *Decoder }

func (w watchBackend) Threads(pid uint32) []uint32 { return w.d.watched[pid] }

func (w watchBackend) Arm(_, tid uint32, slot int, addr uint64, size uint8) {
	if err := w.d.engine.Arm(tid, slot, addr&^7, 8, false); err == nil {
		w.d.arms++
	}
}

func (w watchBackend) Disarm(_, tid uint32, slot int) { w.d.engine.Disarm(tid, slot) }

// Watch adds ComDetective's trap path: the samples of the processes given
// to SetWatched for Communication arm their threads' debug registers
// through e (registers per thread). It may share e with WatchReuse.
func (d *Decoder) Watch(e Watchpoints, registers int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.attach(e); err != nil {
		return err
	}
	d.watcher = comdetect.NewWatcher(d.det, watchBackend{d}, registers, 1)
	return nil
}

// attach makes e the decoder's watchpoint engine: one engine, whichever
// algorithms its registers serve.
func (d *Decoder) attach(e Watchpoints) error {
	if d.engine != nil {
		if d.engine != e {
			return errors.New("the trap path and ReuseTracker share one watchpoint engine")
		}
		return nil
	}
	d.engine = e
	d.watched = map[uint32][]uint32{}
	d.reusing = map[uint32]bool{}
	d.lastOf = map[[2]uint32]int{}
	d.threadCPU = map[uint32]uint32{}
	d.domainIDs = map[string]int{}
	return nil
}

// SetWatched makes tids the watched threads of pid (none: unwatched),
// their registers serving use, opening and closing their watchpoint
// events. A process that changes use starts afresh: its threads' events
// are reopened (a ReuseTracker's leaders sample their thread, the trap
// path's only count) and what the other use kept of it is forgotten (a
// tracker's totals kept with its cgroup's).
func (d *Decoder) SetWatched(pid uint32, tids []uint32, use model.Registers) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.engine == nil {
		return nil
	}
	if len(tids) > 0 {
		switch {
		case use == model.RegistersReuse && d.trackers == nil:
			return errors.New("no ReuseTracker on the watchpoints (WatchReuse)")
		case use == model.RegistersComm && d.watcher == nil:
			return errors.New("no trap path on the watchpoints (Watch)")
		}
	}
	if d.watched[pid] != nil && d.reusing[pid] != (use == model.RegistersReuse) {
		d.unwatch(pid)
	}
	var errs []error
	for _, old := range d.watched[pid] {
		if !slices.Contains(tids, old) {
			d.engine.Remove(old)
			delete(d.threadCPU, old)
		}
	}
	add := d.engine.AddCounting // the trap path needs no distance clock
	if use == model.RegistersReuse {
		add = d.engine.Add
	}
	var kept []uint32
	for _, tid := range tids {
		if err := add(tid); err != nil {
			errs = append(errs, err)
			continue
		}
		kept = append(kept, tid)
	}
	if len(kept) > 0 && use == model.RegistersReuse {
		d.reusing[pid] = true
	}
	if t := d.trackers[pid]; t != nil {
		for _, tid := range kept {
			if !slices.Contains(d.watched[pid], tid) {
				t.Join(tid) // a new thread gets the watched addresses too
			}
		}
	}
	if len(kept) == 0 {
		delete(d.watched, pid)
		delete(d.reusing, pid)
	} else {
		d.watched[pid] = kept
	}
	return errors.Join(errs...)
}

// WatchNewThreads gives a watched process's thread its events at its
// first sample, when SetWatched has not (yet) given it any, up to max
// threads with events in all. The threads SetWatched is given are found
// by reading lists (a cgroup's, every second): without this a thread that
// lives less than that, as a thread-per-request server's do, never gets
// a watchpoint.
func (d *Decoder) WatchNewThreads(max int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.maxWatched = max
}

// join gives thread tid of watched process pid its events, as its
// process's use wants. A thread that has exited by now stays without: its
// sample was read late.
func (d *Decoder) join(pid, tid uint32) {
	if d.engine.Watching(tid) || d.engine.NumThreads() >= d.maxWatched {
		return
	}
	add := d.engine.AddCounting
	if d.reusing[pid] {
		add = d.engine.Add
	}
	if add(tid) != nil {
		return
	}
	d.watched[pid] = append(d.watched[pid], tid)
	d.joined++
	if t := d.trackers[pid]; t != nil {
		t.Join(tid)
	}
}

// WatchedThreads is how many threads have watchpoint events, on the trap
// path and for ReuseTracker.
func (d *Decoder) WatchedThreads() (communication, reuse int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for pid, tids := range d.watched {
		if d.reusing[pid] {
			reuse += len(tids)
		} else {
			communication += len(tids)
		}
	}
	return communication, reuse
}

// ReadTraps drains the watchpoint rings: each trap's access is decoded
// (memop.Resolver.Trap: the instruction before its IP on x86, at it on
// arm64) and recorded as communication with the
// line's publisher, weighing period (the sampler's) × L/(D×M).
func (d *Decoder) ReadTraps(period uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.engine == nil {
		return
	}
	defer d.engine.Flush() // the disarms of the traps read, in effect now
	defer d.disarmOverBudget()
	d.pendingReuse = d.pendingReuse[:0]
	var sampled func(memop.Sampled)
	if d.ownClock {
		sampled = d.reuseSampled
	}
	_, lost := d.engine.ReadSampled(func(tr memop.Trap) {
		d.traps++
		d.charge(tr.PID)
		if d.reusing[tr.PID] {
			d.reuseTraps++
			d.reuseTrapped(tr)
			return
		}
		if d.watcher == nil {
			return
		}
		acc, r := d.resolver.Trap(tr.PID, tr.IP, tr.Regs)
		if r != memop.Resolved {
			d.trapUnresolved++
			return
		}
		a := memaccess.Access{Addr: acc.Addr, Size: uint8(min(acc.Width, 255)), PID: tr.PID, TID: tr.TID, CPU: tr.CPU,
			Store: acc.Kind&memop.Store != 0, Period: period, Time: tr.Time, IP: acc.PC}
		d.watcher.Trapped(&a, period)
	}, sampled)
	d.trapsLost += lost
	d.applyReuse()
}

// WaitTraps blocks until a watchpoint trapped or timeout passed.
func (d *Decoder) WaitTraps(timeout time.Duration) error {
	d.mu.Lock()
	e := d.engine
	d.mu.Unlock()
	if e == nil {
		time.Sleep(timeout)
		return nil
	}
	return e.Wait(timeout)
}

// WatchTotals are the watchpoints' totals since the start.
type WatchTotals struct {
	// Traps read, of which: on the trap path, those whose access could not
	// be decoded and those counted as communication (the others came after
	// their thread was re-armed elsewhere, or were a thread's own line);
	// and those handed to ReuseTracker (each an outcome: a reuse, an
	// invalidation, or stale).
	Traps, Unresolved, Communication, Reuse uint64
	// Lost: traps the kernel dropped for a full ring; Arms: watchpoints
	// armed, by both algorithms; Joined: threads given their events at
	// their first sample (WatchNewThreads).
	Lost, Arms, Joined uint64
}

// WatchStats are the watchpoints' totals.
func (d *Decoder) WatchStats() WatchTotals {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := WatchTotals{Traps: d.traps, Unresolved: d.trapUnresolved, Reuse: d.reuseTraps, Lost: d.trapsLost, Arms: d.arms, Joined: d.joined}
	if d.watcher != nil {
		w.Communication = d.watcher.Traps
	}
	return w
}

// LimitTraps limits each watched process's traps to budget (a share of its CPU
// time) at cost seconds a trap: a sample of a process over its budget is
// used without watchpoints. A process just watched may trap
// watchbudget.Allowance times before it has run long enough to pay for them.
func (d *Decoder) LimitTraps(budget float64, cost time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gov = watchbudget.New(budget, cost.Seconds(), watchbudget.Allowance)
}

// disarmOverBudget disarms every watchpoint of the processes whose traps
// spent their budget: an armed watchpoint would still trap once.
// (ComDetective's and ReuseTracker's slots stay theirs; they are armed
// again, or replaced, by later samples within budget.)
func (d *Decoder) disarmOverBudget() {
	if d.gov == nil {
		return
	}
	for pid, tids := range d.watched {
		if !d.gov.Over(pid) {
			continue
		}
		for _, tid := range tids {
			for slot := range d.engine.Slots() {
				d.engine.Disarm(tid, slot)
			}
		}
	}
}

func (d *Decoder) charge(pid uint32) {
	if d.gov != nil {
		d.gov.Trapped(pid, 1)
	}
}

// Ran tells the watch budget how much CPU time a watched process has run in
// all (seconds).
func (d *Decoder) Ran(pid uint32, cpu float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gov != nil {
		d.gov.Ran(pid, cpu)
	}
}

// TrapBudget is what the watch budget did, and its settings (ok false:
// none).
func (d *Decoder) TrapBudget() (t watchbudget.Totals, budget, cost float64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gov == nil {
		return t, 0, 0, false
	}
	return d.gov.Totals(), d.gov.Share(), d.gov.Cost(), true
}
