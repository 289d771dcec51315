// Package cgroupcount runs the per-cgroup attribution beside the counting
// engine. It places the engine's event file descriptors into the eBPF counter
// (package cgroupbpf) as groups open and takes them out before they close,
// keeps the program attached on every online CPU, and once per cycle credits
// every CPU, reads the per-cgroup counts, resolves cgroup ids to paths, makes
// the kernel forget removed cgroups, and folds the rest into bounded series
// (cgroupattr) with per-cgroup Top-Down (topdown.Keyed). Scrapes read a copy;
// no scrape makes a syscall.
package cgroupcount

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/cgroupattr"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupbpf"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
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
	MaxSeries   int // cgroups with series of their own; the rest are "other"
	Grace       time.Duration
	// Rescan is how often the known cgroups are checked (a stat each) to
	// find removed ones; a new cgroup makes it walk the hierarchy at once.
	Rescan time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// Attributor owns the eBPF counter and the per-cgroup state. The engine's
// hooks and Cycle run on the engine's goroutine; Snapshot may run concurrently.
type Attributor struct {
	opts     Options
	counter  *cgroupbpf.Counter
	resolver *cgroupid.Resolver
	table    *cgroupattr.Table
	unattr   *cgroupattr.Table
	offsets  []int // each class's first index in the flattened counts
	width    int   // flattened counts per cgroup
	// placed says, by flattened index, which events had an fd in the
	// program on some CPU at some time: an event whose group never opened
	// (no PMU for it here) gets no series, rather than a zero that reads
	// as "counted nothing".
	placed    []bool
	keyed     []*topdown.Keyed
	rollup    *cgroupattr.Rollup   // each cgroup's own credits summed into its ancestors
	ancestry  map[uint64][]uint64  // the kernel's record of each cgroup's ancestors, read once
	prev      map[uint64][]float64 // series counts at the previous Top-Down step
	lastCheck time.Time            // of the hierarchy, by a walk or a check
	errors    map[string]uint64
	resets    []int // CPUs whose cgroup-switches event to reopen (ResetCPU)

	mu   sync.Mutex
	snap Snapshot
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
	a := &Attributor{opts: opts, resolver: cgroupid.New(opts.Root), prev: map[uint64][]float64{}, errors: map[string]uint64{}, ancestry: map[uint64][]uint64{}}
	slots := 0
	var rank []int
	for _, c := range opts.Classes {
		a.offsets = append(a.offsets, a.width)
		r := a.width
		for i, s := range c.Events {
			if s.Event == "cpu-clock" {
				r = a.width + i
			}
		}
		rank = append(rank, r)
		a.width += len(c.Events)
		slots = max(slots, len(c.Events))
		var k *topdown.Keyed
		if c.Tree != nil {
			k = topdown.NewKeyed(c.Tree, eventNames(c.Events), c.Params)
			if missing := k.Missing(eventNames(c.Events)); len(missing) > 0 {
				opts.Logger.Warn("per-cgroup Top-Down not computed: the tree's inputs are not all attributed", "pmu", c.PMU, "missing", missing)
				k = nil
			}
		}
		a.keyed = append(a.keyed, k)
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
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		for cpu := 0; cpu < 1024; cpu++ {
			if set.IsSet(cpu) {
				if err := counter.Attach(cpu); err != nil {
					counter.Close()
					return nil, err
				}
				break
			}
		}
	}
	a.lastCheck = opts.Now()
	a.rollup = cgroupattr.NewRollup(a.width)
	a.table = cgroupattr.New(a.width, cgroupattr.Options{MaxSeries: opts.MaxSeries, Grace: opts.Grace, Rank: rank})
	a.unattr = cgroupattr.New(a.width, cgroupattr.Options{MaxSeries: 1, Grace: time.Duration(1<<63 - 1)})
	return a, nil
}

func eventNames(s []Source) []string {
	var out []string
	for _, e := range s {
		out = append(out, e.Event)
	}
	return out
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

// Cycle follows the online CPUs, credits and reads every cgroup, and updates
// the series. Call it after the engine's cycle.
func (a *Attributor) Cycle(online []int) {
	now := a.opts.Now()
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
	readings := map[uint64][]cgroupattr.Reading{}
	sum := make([]cgroupbpf.Reading, cgroupbpf.MaxEvents)
	err := a.counter.Read(func(id uint64, perCPU [][]cgroupbpf.Reading) {
		flat := make([]cgroupattr.Reading, a.width)
		for ci, c := range a.opts.Classes {
			cgroupbpf.Sum(perCPU, c.CPUs, sum[:len(c.Events)])
			for i := range c.Events {
				flat[a.offsets[ci]+i] = cgroupattr.Reading(sum[i])
			}
		}
		readings[id] = flat
	})
	if err != nil {
		a.errors[model.CgroupErrRead]++
		a.opts.Logger.Warn("cannot read the cgroup map", "err", err)
		return
	}
	tracked := len(readings)
	unattributed := readings[cgroupbpf.Unattributed]
	delete(readings, cgroupbpf.Unattributed)
	// The kernel credited each task's own cgroup; the ancestors get their
	// descendants' counts here, by the ancestry the kernel recorded when
	// it first credited each cgroup (one lookup per cgroup, ever).
	own := readings
	readings = a.rollup.Update(own, a.ancestorsOf)
	current := a.resolve(now, readings)
	a.table.Update(now, readings, a.resolver.Path, current)
	if unattributed != nil {
		a.unattr.Update(now, map[uint64][]cgroupattr.Reading{0: unattributed}, func(uint64) (string, bool) { return "", true }, true)
	}
	forgotten := 0
	if current {
		forgotten = a.forgetRemoved(readings, own)
	}
	series := a.table.Series()
	a.topdownStep(series)
	a.publish(series, tracked-forgotten)
}

// resolve makes sure every cgroup read has its path, walking the hierarchy
// when one is new, and checks for removed cgroups every Rescan. It says
// whether the table is known to be current: then an id it cannot resolve
// is a cgroup removed.
func (a *Attributor) resolve(now time.Time, readings map[uint64][]cgroupattr.Reading) (current bool) {
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

// forgetRemoved lets go of the cgroups no longer in the hierarchy (a walk
// or check made after the read said so): their last counts are in the
// table and in their ancestors' totals; the kernel map (for those it held,
// own) and the rollup forget them. It returns how many left the kernel map.
func (a *Attributor) forgetRemoved(readings, own map[uint64][]cgroupattr.Reading) (forgotten int) {
	var gone []uint64
	for id := range readings {
		if _, ok := a.resolver.Path(id); !ok {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		a.rollup.Forget(id)
		delete(a.ancestry, id)
		if _, held := own[id]; !held {
			continue // an ancestor the kernel never credited itself
		}
		if err := a.counter.Forget(id); err != nil {
			a.errors[model.CgroupErrForget]++
		} else {
			forgotten++
		}
	}
	return forgotten
}

// ancestorsOf is cgroup id's ancestors as the kernel recorded them, read
// from its map the first time and kept until the cgroup is forgotten. A
// cgroup without a record (or whose record cannot be read) gives its counts
// to itself alone, counted as an "ancestry" error each time it is asked.
func (a *Attributor) ancestorsOf(id uint64) []uint64 {
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

// topdownStep evaluates each class's tree on every series' counts since the
// previous step.
func (a *Attributor) topdownStep(series []cgroupattr.Series) {
	live := map[uint64]bool{}
	delta := make([]float64, a.width)
	for _, s := range series {
		live[s.ID] = true
		prev := a.prev[s.ID]
		if prev == nil {
			prev = make([]float64, a.width)
		}
		for i, v := range s.Counts {
			// A series that starts over (promoted from other) steps from zero.
			delta[i] = max(v-prev[i], 0)
		}
		a.prev[s.ID] = s.Counts
		for ci, k := range a.keyed {
			if k != nil {
				k.Add(s.ID, delta[a.offsets[ci]:a.offsets[ci]+len(a.opts.Classes[ci].Events)])
			}
		}
	}
	for id := range a.prev {
		if !live[id] {
			delete(a.prev, id)
			for _, k := range a.keyed {
				if k != nil {
					k.Forget(id)
				}
			}
		}
	}
}

// Snapshot is what the exporter reads (model.CgroupSnapshot): one series
// per cgroup (Cgroup) with its event counts (Count).
type (
	Snapshot = model.CgroupSnapshot
	Cgroup   = model.Cgroup
	Count    = model.Count
)

func (a *Attributor) publish(series []cgroupattr.Series, tracked int) {
	s := Snapshot{Tracked: tracked, Errors: map[string]uint64{}}
	for k, v := range a.errors {
		s.Errors[k] = v
	}
	if st, err := a.counter.Stats(); err == nil {
		s.Switches = st
		s.Errors[model.CgroupErrMapFull] = st.MapFull
	}
	for _, k := range a.keyed {
		s.TopDown = s.TopDown || k != nil
	}
	for _, sr := range series {
		c := Cgroup{Path: sr.Path, Events: a.events(sr.Counts)}
		if sr.Path != cgroupattr.Other && sr.Path != cgroupattr.Gone {
			c.Identity, _ = podcgroup.Parse(sr.Path)
		}
		byName := map[string]int{}
		for _, k := range a.keyed {
			if k == nil {
				continue
			}
			slots, nodes, ok := k.Totals(sr.ID)
			if !ok {
				continue
			}
			c.HasSlots = true
			c.Slots += slots
			for _, n := range nodes {
				if i, ok := byName[n.Name]; ok {
					c.Nodes[i].Slots += n.Slots
					continue
				}
				byName[n.Name] = len(c.Nodes)
				c.Nodes = append(c.Nodes, n)
			}
		}
		s.Cgroups = append(s.Cgroups, c)
	}
	// Zero until a switch goes by unseen, so that the series exist from
	// the start.
	s.Unattributed = a.events(make([]float64, a.width))
	for _, sr := range a.unattr.Series() {
		s.Unattributed = a.events(sr.Counts)
	}
	a.mu.Lock()
	a.snap = s
	a.mu.Unlock()
}

// events sums flattened counts by event name over classes: the visible
// ones that were ever placed.
func (a *Attributor) events(counts []float64) []Count {
	sums := map[string]float64{}
	for ci, c := range a.opts.Classes {
		for i, src := range c.Events {
			if j := a.offsets[ci] + i; !src.Hidden && a.placed[j] {
				sums[src.Event] += counts[j]
			}
		}
	}
	out := make([]Count, 0, len(sums))
	for n, v := range sums {
		out = append(out, Count{Event: n, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Event < out[j].Event })
	return out
}

// Snapshot returns the state after the latest cycle.
func (a *Attributor) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snap
}

// Close detaches the program and frees its maps. Call it after the engine has
// closed its groups (their OnClose has run).
func (a *Attributor) Close() error {
	return a.counter.Close()
}

// MapBytes is the kernel's estimate of the memory of its maps (cgroups and ancestry).
func (a *Attributor) MapBytes() (uint64, error) { return a.counter.MapBytes() }
