// Package perfcount runs the counting loop. It keeps every configured event group
// open on each online CPU the group applies to, reads each group once per interval
// (one read(2)), folds the readings into multiplex-scaled totals, follows CPU
// hotplug by closing and reopening groups, and hands out copies of its state, so a
// scrape never makes a perf syscall.
package perfcount

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/readformat"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// GroupSpec is one group to count (eventspec.Group).
type GroupSpec = eventspec.Group

// Options configure an Engine.
type Options struct {
	Groups []GroupSpec
	// OnlineCPUs lists the online CPUs; called once per cycle to follow hotplug.
	OnlineCPUs func() ([]int, error)
	// Hotplug, if set, wakes Run for a cycle at once when a CPU goes
	// online or offline (cpuhotplug): a CPU that came online then counts
	// from milliseconds after, not from the next cycle.
	Hotplug <-chan cpuhotplug.Event
	// ObserveRead, if set, receives the duration of each read cycle in seconds.
	ObserveRead func(seconds float64)
	Logger      *slog.Logger
	// RetryAfter is how long a group that failed to open for a transient reason
	// (fd limit, busy counters, CPU not there) waits before the next try.
	RetryAfter time.Duration
	// Now is the clock (tests); defaults to time.Now.
	Now func() time.Time
	// Sleep waits between a cycle's reads and its second look at the CPUs
	// whose events lag the clock (tests count the calls); defaults to
	// time.Sleep.
	Sleep func(time.Duration)
	// AfterCycle, if set, runs after every cycle, outside the engine's lock: the
	// place to derive metrics from a fresh Snapshot.
	AfterCycle func()
	// AroundCycle, if set, runs each cycle (its reads and AfterCycle) as
	// work, on Run's thread, which stays locked to its goroutine: the place
	// to count what a cycle costs with counters on that thread.
	AroundCycle func(work func())
	// OnOpen and OnClose, if set, see each group open on a CPU and each one
	// about to close (CPU offline, engine closed), with its file descriptors
	// still valid: the hook for consumers that read the fds themselves (the
	// eBPF cgroup attribution), which must let go before the fds close.
	// events names the group's events in fd order.
	OnOpen, OnClose func(group string, events []string, cpu int, g *perf.Group)
	// Open opens a group; defaults to perf.OpenGroup. Tests use it to emulate
	// PMUs this machine does not have.
	Open func(attrs []eventspec.Attr, names []string, t perf.Target) (*perf.Group, error)
	// OnCPUReset, if set, hears of every CPU whose events the engine found
	// dead and reopened, with the cause, after the cycle and outside the
	// engine's lock: the other users of per-CPU events (sampling, the
	// cgroup program, a perf cgroup mode engine) must reopen theirs too.
	OnCPUReset func(cpu int, cause string)
}

// Engine owns the open groups. Cycle is called by one goroutine (Run); Snapshot
// may be called concurrently from scrapes.
type Engine struct {
	opts   Options
	groups []*groupState
	online []int

	cycles atomic.Uint64 // completed cycles; read by readiness probes without the lock

	mu         sync.Mutex // guards everything below and the accumulators
	readErrors map[string]uint64
	reopened   map[int]uint64  // per CPU: times its events were found dead and reopened
	resetReq   map[int]string  // CPUs to reopen at the next cycle (ResetCPU), with the cause
	suspects   map[int]suspect // this cycle's CPUs whose events lagged the clock
	dead       map[int]string  // this cycle's CPUs to reopen, with the cause (reused)
}

// suspect is a group whose time_enabled fell behind the clock, as its
// read in this cycle left it: its CPU's events are dead if a later read
// finds the same time_enabled.
type suspect struct {
	cg      *cpuGroup
	enabled uint64
}

type groupState struct {
	spec   GroupSpec
	attrs  []eventspec.Attr
	names  []string
	cpus   []int // nil: all
	perCPU map[int]*cpuGroup
	// split is set when the group cannot fit the PMU's counters: its events are
	// then counted by one single-event group each, and this group reports the
	// failure but exports no events of its own.
	split bool
}

func newGroupState(spec GroupSpec) *groupState {
	gs := &groupState{spec: spec, cpus: spec.CPUs(), perCPU: map[int]*cpuGroup{}}
	for _, ev := range spec.Events {
		gs.attrs = append(gs.attrs, ev.Attr)
		gs.names = append(gs.names, ev.Name)
	}
	return gs
}

type cpuGroup struct {
	g       *perf.Group // nil when not open
	values  []uint64    // scratch for reads
	acc     *readformat.Accumulator
	failure *model.OpenError // last open failure, nil when open
	retryAt time.Time
	tries   int // consecutive failed opens, for the retry backoff
	idle    int // consecutive intervals in which the open group did not run
	// The previous read of the open group: when it was made (monotonic,
	// just before the syscall) and the time_enabled it returned. A
	// system-wide event's time_enabled advances with the clock for as long
	// as it is attached to its CPU.
	readAt  time.Time
	enabled uint64
}

// starvedAfter is how many intervals in a row a group may go unscheduled before
// the engine says so: on x86 the kernel checks at open that a group could fit,
// but counters taken by the NMI watchdog, pinned events or other users can still
// leave it waiting forever.
const starvedAfter = 10

// New prepares an engine; no file descriptor is opened until the first Cycle.
func New(opts Options) *Engine {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = time.Sleep
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = time.Minute
	}
	if opts.Open == nil {
		opts.Open = perf.OpenGroup
	}
	e := &Engine{opts: opts, readErrors: map[string]uint64{}, reopened: map[int]uint64{}, resetReq: map[int]string{}, suspects: map[int]suspect{}, dead: map[int]string{}}
	for _, spec := range opts.Groups {
		e.groups = append(e.groups, newGroupState(spec))
	}
	return e
}

// Run calls Cycle every interval, and at each hotplug event, until ctx
// ends, then closes every group.
func (e *Engine) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer e.Close()
	runtime.LockOSThread() // a cycle's cost is counted on this thread
	defer runtime.UnlockOSThread()
	work := func() {
		e.Cycle()
		if e.opts.AfterCycle != nil {
			e.opts.AfterCycle()
		}
	}
	cycle := work
	if e.opts.AroundCycle != nil {
		cycle = func() { e.opts.AroundCycle(work) }
	}
	cycle()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cycle()
		case <-e.opts.Hotplug:
			cycle()
		}
	}
}

// Cycle follows hotplug (opening and closing groups) and reads every open group once.
//
// A CPU that goes offline and comes back between two cycles leaves its old
// events open but detached: they read without error and never count again,
// and the online list looks unchanged. Cycle finds them by their
// time_enabled, which stops advancing, and reopens every group on that CPU
// (see OnCPUReset).
func (e *Engine) Cycle() {
	resets := e.cycle()
	if e.opts.OnCPUReset != nil {
		for _, r := range resets {
			e.opts.OnCPUReset(r.cpu, r.cause)
		}
	}
}

type cpuReset struct {
	cpu   int
	cause string
}

func (e *Engine) cycle() []cpuReset {
	start := time.Now()
	online, err := e.opts.OnlineCPUs()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.readErrors["online_cpus"]++
		e.opts.Logger.Error("cannot list online CPUs; keeping the previous set", "err", err)
		online = e.online
	}
	now := e.opts.Now()
	// The maps are reused: a cycle allocates nothing unless a CPU is reset.
	dead := e.dead
	clear(dead)
	maps.Copy(dead, e.resetReq)
	clear(e.resetReq)
	for i := 0; i < len(e.groups); i++ { // e.groups may grow when a group is split
		gs := e.groups[i]
		for cpu, cg := range gs.perCPU {
			if cg.g != nil && !slices.Contains(online, cpu) {
				// Offline: take the last counts, then close; totals stay.
				e.read(gs, cg)
				e.closeGroup(gs, cpu, cg)
				e.opts.Logger.Info("CPU went offline; closed group", "group", gs.spec.Name, "cpu", cpu)
			}
		}
		for _, cpu := range online {
			if gs.cpus != nil && !cpuset.Contains(gs.cpus, cpu) {
				continue
			}
			cg := gs.perCPU[cpu]
			if cg == nil {
				cg = &cpuGroup{acc: readformat.New(len(gs.attrs)), values: make([]uint64, len(gs.attrs))}
				gs.perCPU[cpu] = cg
			}
			if cg.g == nil {
				e.open(gs, cpu, cg, now)
				continue // a fresh group has nothing to read yet
			}
			if cause := e.read(gs, cg); cause != "" && dead[cpu] == "" {
				dead[cpu] = cause
			}
		}
	}
	e.confirmDead(dead)
	var resets []cpuReset
	if len(dead) > 0 {
		for _, cpu := range slices.Sorted(maps.Keys(dead)) {
			if !slices.Contains(online, cpu) {
				continue
			}
			e.reopenCPU(cpu, now)
			e.reopened[cpu]++
			e.opts.Logger.Warn("the events of a CPU stopped counting; reopened every group there", "cpu", cpu, "cause", dead[cpu])
			resets = append(resets, cpuReset{cpu, dead[cpu]})
		}
	}
	e.online = online
	e.cycles.Add(1)
	if e.opts.ObserveRead != nil {
		e.opts.ObserveRead(time.Since(start).Seconds())
	}
	return resets
}

// reopenCPU closes and reopens every group open on cpu. What the old events
// counted up to their last read stays in the totals; the new ones start from
// zero.
func (e *Engine) reopenCPU(cpu int, now time.Time) {
	for _, gs := range e.groups {
		cg := gs.perCPU[cpu]
		if cg == nil || cg.g == nil {
			continue
		}
		e.closeGroup(gs, cpu, cg)
		e.open(gs, cpu, cg, now)
	}
}

// ResetCPU makes the next cycle reopen every group on cpu: for the users of
// another engine's OnCPUReset, whose own groups (perf's cgroup mode) cannot
// tell a dead event from a cgroup that did not run.
func (e *Engine) ResetCPU(cpu int, cause string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resetReq[cpu] = cause
}

func (e *Engine) open(gs *groupState, cpu int, cg *cpuGroup, now time.Time) {
	if cg.failure != nil && (!transient(cg.failure.Reason) || now.Before(cg.retryAt)) {
		return
	}
	target := perf.SystemWide(cpu)
	if gs.spec.Cgroup != nil {
		target.CgroupFD = int(gs.spec.Cgroup.Fd())
	}
	g, err := e.opts.Open(gs.attrs, gs.names, target)
	if err != nil {
		var oe *model.OpenError
		if !errors.As(err, &oe) {
			oe = &model.OpenError{Event: gs.spec.Name, CPU: cpu, Err: err, Reason: model.ReasonInvalid}
		}
		if oe.Reason == model.ReasonGroupDoesNotFit && !gs.split {
			e.splitGroup(gs)
		}
		if cg.failure == nil || cg.failure.Reason != oe.Reason {
			e.opts.Logger.Warn("cannot open event group", "group", gs.spec.Name, "cpu", cpu,
				"event", oe.Event, "reason", oe.Reason, "err", oe.Err, "fix", oe.Fix())
		}
		cg.failure, cg.retryAt = oe, now.Add(e.retryDelay(cg.tries))
		cg.tries++
		return
	}
	if cg.failure != nil || cg.acc.Intervals > 0 {
		e.opts.Logger.Info("opened event group", "group", gs.spec.Name, "cpu", cpu)
	}
	cg.g, cg.failure, cg.tries = g, nil, 0
	cg.readAt, cg.enabled = time.Time{}, 0
	cg.acc.Rebase()
	if e.opts.OnOpen != nil {
		e.opts.OnOpen(gs.spec.Name, gs.names, cpu, g)
	}
}

// closeGroup tells OnClose, then closes the group's fds.
func (e *Engine) closeGroup(gs *groupState, cpu int, cg *cpuGroup) {
	if e.opts.OnClose != nil {
		e.opts.OnClose(gs.spec.Name, gs.names, cpu, cg.g)
	}
	cg.g.Close()
	cg.g = nil
}

// splitGroup counts each event of a group that cannot fit the PMU on its own, so
// nothing is dropped; the kernel then multiplexes them and each is scaled by its
// own enabled/running times, so ratios between them are estimates.
func (e *Engine) splitGroup(gs *groupState) {
	gs.split = true
	e.opts.Logger.Warn("event group needs more counters than the PMU has; counting its events one by one, so ratios between them are no longer from one schedule",
		"group", gs.spec.Name, "events", len(gs.spec.Events), "fix", "split the group in the configuration into groups that fit")
	for _, ev := range gs.spec.Events {
		e.groups = append(e.groups, newGroupState(GroupSpec{Name: gs.spec.Name + "/" + ev.Name, Events: []eventspec.Event{ev}, Hidden: gs.spec.Hidden, Cgroup: gs.spec.Cgroup}))
	}
}

// retryDelay is how long a group waits before its next open after tries
// failed ones: none after the first (a CPU coming online under load can
// refuse an open for a moment, ENODEV), then 1 s doubling up to RetryAfter.
func (e *Engine) retryDelay(tries int) time.Duration {
	if tries == 0 {
		return 0
	}
	return min(e.opts.RetryAfter, time.Second<<min(tries-1, 30))
}

// transient reasons may clear up by themselves; the others need a change of
// configuration or privilege, so retrying would only repeat the syscall.
func transient(r model.OpenReason) bool {
	return r == model.ReasonFDLimit || r == model.ReasonBusy || r == model.ReasonNoDevice
}

// read reads one group on one CPU into its accumulator. Reads are made from
// whichever CPU this goroutine is on, so the kernel fetches a remote CPU's counts
// with an IPI; reading from threads pinned to each CPU was measured and cost more
// CPU time in thread hand-offs than it saved (docs/benchmarks.md).
//
// It returns why the CPU's events are dead, or "". A system-wide group's
// time_enabled advances with the clock while it is attached to its CPU;
// when it fell behind the time since the previous read (by more than the
// jitter of a read), its CPU is a suspect, which confirmDead settles after
// the cycle's reads. A cgroup-mode group's time only runs while its cgroup
// does, so it cannot tell: ResetCPU reaches it.
func (e *Engine) read(gs *groupState, cg *cpuGroup) (dead string) {
	before := time.Now()
	enabled, running, err := cg.g.Read(cg.values)
	if errors.Is(err, perf.ErrGroupBroken) {
		// Its CPU went offline: what the members counted since the last
		// read is still there, one member at a time.
		if enabled, running, err = cg.g.ReadMembers(cg.values); err == nil {
			cg.acc.Add(readformat.Reading{Enabled: enabled, Running: running, Values: cg.values})
			cg.readAt, cg.enabled = before, enabled
			return "the kernel broke the group up: the CPU went offline since the previous read"
		}
	}
	if err != nil {
		e.readErrors["read"]++
		e.opts.Logger.Debug("group read failed", "group", gs.spec.Name, "cpu", cg.g.CPU, "err", err)
		return "read error: " + err.Error()
	}
	wall := before.Sub(cg.readAt)
	lags := gs.spec.Cgroup == nil && !cg.readAt.IsZero() && time.Duration(enabled-cg.enabled) < wall-wall/64-time.Millisecond
	cg.readAt, cg.enabled = before, enabled
	if cg.acc.Add(readformat.Reading{Enabled: enabled, Running: running, Values: cg.values}) {
		cg.idle = 0
	} else if cg.idle++; cg.idle == starvedAfter {
		e.opts.Logger.Warn("event group has not been scheduled on the PMU; it yields no values",
			"group", gs.spec.Name, "cpu", cg.g.CPU, "intervals", cg.idle, "fix", starvedFix(gs))
	}
	if lags {
		if _, ok := e.suspects[cg.g.CPU]; !ok {
			e.suspects[cg.g.CPU] = suspect{cg, enabled}
		}
	}
	return ""
}

// confirmDead reads one lagging group of each suspect CPU again, a
// millisecond after the cycle's reads, and adds to dead those whose
// time_enabled did not move at all: the kernel detached their events when
// the CPU went offline, which on this project's VMs comes some 40 ms after
// the write to sysfs. A live CPU's events lag too where perf's cgroup
// events are open there and its cgroups switch often (each switch stops
// the CPU's perf time for a moment; docs/testing.md), but they move. One wait
// serves every suspect, so a cycle costs that millisecond once, not once
// per CPU.
func (e *Engine) confirmDead(dead map[int]string) {
	if len(e.suspects) == 0 {
		return
	}
	defer clear(e.suspects)
	e.opts.Sleep(time.Millisecond)
	for cpu, s := range e.suspects {
		if s.cg.g == nil || dead[cpu] != "" {
			continue // closed since (its CPU went offline), or already known dead
		}
		if again, _, err := s.cg.g.Read(s.cg.values); err != nil || again == s.enabled {
			dead[cpu] = "time_enabled stopped advancing: the CPU went offline and back since the previous read, and the kernel detached its events"
		}
	}
}

// starvedFix says what to do about a group that never runs, by its kind:
// software events are never multiplexed, and a cgroup-mode group only runs
// while its cgroup has a task on the CPU.
func starvedFix(gs *groupState) string {
	if gs.spec.Cgroup != nil {
		return "none if the cgroup ran no task on this CPU: perf's cgroup mode counts only while one does"
	}
	software := true
	for _, a := range gs.attrs {
		software = software && a.Type == unix.PERF_TYPE_SOFTWARE
	}
	if software {
		return "software events are never multiplexed, so the group was disabled by another program or its CPU's events were detached; if it persists, restart the exporter and report it"
	}
	return "free counters: sysctl kernel.nmi_watchdog=0, stop other perf users, or make the group smaller"
}

// Cycles is the number of completed read cycles; it takes no lock.
func (e *Engine) Cycles() uint64 { return e.cycles.Load() }

// Close closes every open group.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, gs := range e.groups {
		for cpu, cg := range gs.perCPU {
			if cg.g != nil {
				e.closeGroup(gs, cpu, cg)
			}
		}
	}
}

// Snapshot is a copy of the engine's totals (model.Snapshot), with its
// event and group totals.
type (
	Snapshot    = model.Snapshot
	EventTotals = model.EventTotals
	GroupTotals = model.GroupTotals
)

// Snapshot copies the current totals; it makes no syscall.
func (e *Engine) Snapshot() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Snapshot{ReadErrors: maps.Clone(e.readErrors), Reopened: maps.Clone(e.reopened), Cycles: e.cycles.Load()}
	for _, gs := range e.groups {
		gt := GroupTotals{Name: gs.spec.Name, EnabledNS: map[int]uint64{}, RunningNS: map[int]uint64{},
			Failures: map[model.OpenReason]int{}, Failure: map[model.OpenReason]*model.OpenError{}}
		gt.Split, gt.Hidden = gs.split, gs.spec.Hidden
		evs := make([]EventTotals, len(gs.spec.Events))
		for i, ev := range gs.spec.Events {
			evs[i] = EventTotals{Group: gs.spec.Name, Event: ev.Name, PMU: ev.PMU, Scale: ev.Scale, Unit: ev.Unit, Hidden: gs.spec.Hidden, PerCPU: map[int]uint64{}}
		}
		for cpu, cg := range gs.perCPU {
			gt.EnabledNS[cpu] = cg.acc.EnabledNS
			gt.RunningNS[cpu] = cg.acc.RunningNS
			gt.NotRunning += cg.acc.NotRunning
			if cg.g != nil {
				gt.OpenCPUs++
			}
			if cg.failure != nil {
				gt.Failures[cg.failure.Reason]++
				gt.Failure[cg.failure.Reason] = cg.failure
			}
			if cg.acc.Intervals == cg.acc.NotRunning {
				continue // never read, or never ran: no value rather than a zero
			}
			for i := range evs {
				evs[i].PerCPU[cpu] = cg.acc.Totals[i]
			}
		}
		s.Groups = append(s.Groups, gt)
		if !gs.split {
			s.Events = append(s.Events, evs...)
		}
	}
	return s
}
