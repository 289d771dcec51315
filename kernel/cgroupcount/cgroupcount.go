// Package cgroupcount runs the per-cgroup attribution beside the counting
// engine. It places the engine's event file descriptors into the eBPF counter
// (package cgroupbpf) as groups open and takes them out before they close,
// keeps the program attached on every online CPU, and once per cycle credits
// every CPU, reads the per-cgroup counts and resolves cgroup ids to paths,
// and hands each read over as plain values (model.CgroupCounts). The
// analysis (analysis/cgroupattr) rolls them into ancestors and bounded
// series with per-cgroup Top-Down, asking it (Path, Ancestors, Forget) what
// ids name and to forget removed cgroups. No scrape makes a syscall.
package cgroupcount

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpubind"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Options configure an Attributor.
type Options struct {
	Classes []Class // from Plan
	Root    string  // the mount of the hierarchy that holds perf_event, whose ids are resolved
	// PerfEventV1 says that hierarchy is cgroup v1's perf_event (else v2).
	PerfEventV1 bool
	Depth       int // ancestor levels credited (see cgroupbpf.Options)
	MaxCgroups  int // entries of the kernel's cgroup map
	// Rescan is how often the known cgroups are checked (a stat each) to
	// find removed ones; a new cgroup makes it walk the hierarchy at once.
	Rescan time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// Attributor owns the eBPF counter and the kernel's side of the per-cgroup
// state. The engine's hooks, Cycle, Health and the analysis's calls (Path,
// Ancestors, Forget) all run on the engine's goroutine.
type Attributor struct {
	opts     Options
	counter  *cgroupbpf.Counter
	resolver *cgroupid.Resolver
	offsets  []int // each class's first index in the flattened counts
	width    int   // flattened counts per cgroup
	// placed says, by flattened index, which events had an fd in the
	// program on some CPU at some time: an event whose group never opened
	// (no PMU for it here) gets no series, rather than a zero that reads
	// as "counted nothing".
	placed    []bool
	ancestry  map[uint64][]uint64 // the kernel's record of each cgroup's ancestors, read once
	held      map[uint64]bool     // the cgroups the kernel's map held at the last read
	lastCheck time.Time           // of the hierarchy, by a walk or a check
	resets    []int               // CPUs whose cgroup-switches event to reopen (ResetCPU)
	errors    map[string]uint64
}

// New loads the program sized for the classes' events. The error says why
// attribution is not possible (no privilege, no BPF, too old a kernel).
func New(opts Options) (*Attributor, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rescan <= 0 {
		opts.Rescan = 10 * time.Second
	}
	a := &Attributor{opts: opts, resolver: cgroupid.New(opts.Root), errors: map[string]uint64{}, ancestry: map[uint64][]uint64{}, held: map[uint64]bool{}}
	slots := 0
	for _, c := range opts.Classes {
		a.offsets = append(a.offsets, a.width)
		a.width += len(c.Events)
		slots = max(slots, len(c.Events))
	}
	if slots == 0 {
		return nil, fmt.Errorf("no event can be attributed to cgroups")
	}
	a.placed = make([]bool, a.width)
	if err := a.resolver.Walk(); err != nil {
		return nil, err
	}
	counter, err := cgroupbpf.Load(cgroupbpf.Options{Events: slots, Depth: opts.Depth, MaxCgroups: opts.MaxCgroups, PerfEventV1: opts.PerfEventV1})
	if err != nil {
		return nil, err
	}
	a.counter = counter
	// Attach where this process may run (an online CPU), so that a kernel
	// without cgroup-switches (before 5.13) or without the privilege to
	// attach says so here rather than in every cycle.
	if cpus, err := cpubind.Allowed(); err == nil && len(cpus) > 0 {
		if err := counter.Attach(cpus[0]); err != nil {
			counter.Close()
			return nil, err
		}
	}
	a.lastCheck = opts.Now()
	return a, nil
}

// class returns the class counting on cpu, or -1.
func (a *Attributor) class(cpu int) int {
	for i, c := range a.opts.Classes {
		if c.CPUs == nil || cpuset.Contains(c.CPUs, cpu) {
			return i
		}
	}
	return -1
}

// slotsOf yields the program slots that group's events fill on cpu.
func (a *Attributor) slotsOf(group string, events []string, cpu int, fn func(slot, index int)) {
	ci := a.class(cpu)
	if ci < 0 {
		return
	}
	for slot, s := range a.opts.Classes[ci].Events {
		for i, name := range events {
			// A group too big for the PMU is counted one event per group,
			// named <group>/<event>.
			if name == s.Event && (group == s.Group || group == s.Group+"/"+s.Event) {
				fn(slot, i)
			}
		}
	}
}

// OnOpen is the engine's hook: the group's fds become the program's events,
// read as sharedTimes says (one perf group's members share their times).
func (a *Attributor) OnOpen(group string, events []string, cpu int, g *perf.Group) {
	var slots, index []int
	a.slotsOf(group, events, cpu, func(slot, i int) {
		slots, index = append(slots, slot), append(index, i)
	})
	names := make([]string, len(index))
	for k, i := range index {
		names[k] = events[i]
	}
	for k, how := range sharedTimes(slots, names) {
		if err := a.counter.SetEvent(slots[k], cpu, g.FD(index[k]), how); err != nil {
			a.errors[model.CgroupErrPlace]++
			a.opts.Logger.Warn("cannot attribute an event to cgroups", "event", names[k], "cpu", cpu, "err", err)
			continue
		}
		if ci := a.class(cpu); ci >= 0 {
			a.placed[a.offsets[ci]+slots[k]] = true
		}
	}
}

// OnClose is the engine's hook: the program lets go of the fds before they close.
func (a *Attributor) OnClose(group string, events []string, cpu int, g *perf.Group) {
	a.slotsOf(group, events, cpu, func(slot, i int) {
		if err := a.counter.ClearEvent(slot, cpu); err != nil {
			a.errors[model.CgroupErrPlace]++
			a.opts.Logger.Warn("cannot remove an event from the cgroup program", "event", events[i], "cpu", cpu, "err", err)
		}
	})
}

// ResetCPU makes the next Cycle reopen cpu's cgroup-switches event: after a
// quick offline and online the kernel has detached it, and the program would
// never run there again. It is the engine's OnCPUReset, which also re-places
// the counting fds through OnClose and OnOpen; call it on the engine's
// goroutine.
func (a *Attributor) ResetCPU(cpu int) { a.resets = append(a.resets, cpu) }

// Cycle follows the online CPUs, credits and reads every cgroup, and
// resolves the ids read to paths. ok is false where the map could not be
// read (counted in Health's errors). Call it after the engine's cycle.
func (a *Attributor) Cycle(online []int) (c model.CgroupCounts, now time.Time, ok bool) {
	now = a.opts.Now()
	for _, cpu := range a.counter.Attached() {
		if !slices.Contains(online, cpu) || slices.Contains(a.resets, cpu) {
			a.counter.Detach(cpu)
		}
	}
	a.resets = a.resets[:0]
	for _, cpu := range online {
		if err := a.counter.Attach(cpu); err != nil {
			if a.errors[model.CgroupErrAttach]++; a.errors[model.CgroupErrAttach] == 1 {
				a.opts.Logger.Warn("cannot attach the cgroup program; counted in pmu_cgroup_attribution_errors_total", "cpu", cpu, "err", err)
			}
			continue
		}
		if err := a.counter.CreditNow(cpu); err != nil {
			a.errors[model.CgroupErrCredit]++
		}
	}
	readings := map[uint64][]model.CgroupReading{}
	sum := make([]cgroupbpf.Reading, cgroupbpf.MaxEvents)
	err := a.counter.Read(func(id uint64, perCPU [][]cgroupbpf.Reading) {
		flat := make([]model.CgroupReading, a.width)
		for ci, c := range a.opts.Classes {
			cgroupbpf.Sum(perCPU, c.CPUs, sum[:len(c.Events)])
			for i := range c.Events {
				flat[a.offsets[ci]+i] = model.CgroupReading(sum[i])
			}
		}
		readings[id] = flat
	})
	if err != nil {
		a.errors[model.CgroupErrRead]++
		a.opts.Logger.Warn("cannot read the cgroup map", "err", err)
		return c, now, false
	}
	c.Tracked = len(readings)
	c.Unattributed = readings[cgroupbpf.Unattributed]
	delete(readings, cgroupbpf.Unattributed)
	clear(a.held)
	for id := range readings {
		a.held[id] = true
	}
	c.Own = readings
	c.Current = a.resolve(now, readings)
	c.Placed = a.placed // read during the analysis's Update, on this goroutine
	return c, now, true
}

// Path is the path of the cgroup id names, as the latest walk found it.
func (a *Attributor) Path(id uint64) (string, bool) { return a.resolver.Path(id) }

// Forget makes the kernel's map let go of a removed cgroup, and this side
// of its ancestry; it says whether the map held it at the latest read (an
// ancestor the kernel never credited itself is not there).
func (a *Attributor) Forget(id uint64) bool {
	delete(a.ancestry, id)
	if !a.held[id] {
		return false
	}
	delete(a.held, id)
	if err := a.counter.Forget(id); err != nil {
		a.errors[model.CgroupErrForget]++
		return false
	}
	return true
}

// Health fills what the kernel's side knows of a snapshot: its errors by
// kind and the program's own counters.
func (a *Attributor) Health(s *model.CgroupSnapshot) {
	s.Errors = maps.Clone(a.errors)
	if st, err := a.counter.Stats(); err == nil {
		s.Switches = st
		s.Errors[model.CgroupErrMapFull] = st.MapFull
	}
}

// resolve makes sure every cgroup read has its path, walking the hierarchy
// when one is new, and checks for removed cgroups every Rescan. It says
// whether the table is known to be current: then an id it cannot resolve
// is a cgroup removed.
func (a *Attributor) resolve(now time.Time, readings map[uint64][]model.CgroupReading) (current bool) {
	walked, current := false, false
	walk := func() {
		if walked {
			return
		}
		walked = true
		if err := a.resolver.Walk(); err != nil {
			a.errors[model.CgroupErrWalk]++
			a.opts.Logger.Warn("cannot resolve cgroup ids", "err", err)
			current = false // an unknown id may be a cgroup it did not reach
			return
		}
		current, a.lastCheck = true, now
	}
	if now.Sub(a.lastCheck) >= a.opts.Rescan {
		// Removed cgroups, found by a stat of each known one.
		if err := a.resolver.Check(); err != nil {
			a.errors[model.CgroupErrWalk]++
			a.opts.Logger.Warn("cannot check the cgroup hierarchy", "err", err)
		} else {
			current, a.lastCheck = true, now
		}
	}
	for id := range readings {
		if _, ok := a.resolver.Path(id); !ok {
			walk()
			break
		}
	}
	return current
}

// Ancestors are cgroup id's ancestors as the kernel recorded them, read
// from its map the first time and kept until the cgroup is forgotten. A
// cgroup without a record (or whose record cannot be read) gives its counts
// to itself alone, counted as an "ancestry" error each time it is asked.
func (a *Attributor) Ancestors(id uint64) []uint64 {
	if ids, ok := a.ancestry[id]; ok {
		return ids
	}
	ids, ok, err := a.counter.Ancestors(id)
	if err != nil || !ok {
		if a.errors[model.CgroupErrAncestry]++; a.errors[model.CgroupErrAncestry] == 1 {
			a.opts.Logger.Warn("a cgroup's ancestors are not known: its counts reach it alone; counted in pmu_cgroup_attribution_errors_total", "id", id, "err", err)
		}
		return nil
	}
	a.ancestry[id] = ids
	return ids
}

// Close detaches the program and frees its maps. Call it after the engine has
// closed its groups (their OnClose has run).
func (a *Attributor) Close() error {
	return a.counter.Close()
}

// MapBytes is the kernel's estimate of the memory of its maps (cgroups and ancestry).
func (a *Attributor) MapBytes() (uint64, error) { return a.counter.MapBytes() }
