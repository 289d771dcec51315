package cgroupattr

import (
	"log/slog"
	"sort"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Class is one core type's attributed events, in the program's slot order
// (kernel/cgroupcount's plan), and the Top-Down tree evaluated on them.
type Class struct {
	PMU    string // the core PMU ("" where the host has one, or none)
	Events []string
	// Hidden events feed Top-Down only and, as on the node, get no
	// pmu_cgroup_events_total series.
	Hidden []bool
	Tree   *metric.Tree       // nil: no per-cgroup Top-Down on this class
	Params map[string]float64 // the tree's smt_on, #slots, ...
}

// Source is the kernel's side of the attribution (kernel/cgroupcount):
// what a cgroup id names, whose descendant it is, and letting go of a
// cgroup removed.
type Source interface {
	Path(id uint64) (string, bool)
	Ancestors(id uint64) []uint64
	// Forget makes the kernel's map let go of a removed cgroup; it says
	// whether the map held it.
	Forget(id uint64) bool
}

// Attribution turns each read of the kernel's per-cgroup counts into the
// per-cgroup series: each cgroup's own credits summed into its ancestors
// (Rollup), bounded into series (Table), and Top-Down per series
// (topdown.Keyed).
type Attribution struct {
	classes []Class
	offsets []int // each class's first index in the flattened counts
	width   int   // flattened counts per cgroup
	table   *Table
	unattr  *Table
	rollup  *Rollup
	keyed   []*topdown.Keyed
	prev    map[uint64][]float64 // series counts at the previous Top-Down step
}

// NewAttribution makes the analysis for classes; opts bound the series (its
// Rank is chosen here: the cpu-clock of each class). A class whose tree's
// inputs are not all attributed computes no Top-Down, with a warning.
func NewAttribution(classes []Class, opts Options, logger *slog.Logger) *Attribution {
	a := &Attribution{classes: classes, prev: map[uint64][]float64{}}
	var rank []int
	for _, c := range classes {
		a.offsets = append(a.offsets, a.width)
		r := a.width
		for i, name := range c.Events {
			if name == "cpu-clock" {
				r = a.width + i
			}
		}
		rank = append(rank, r)
		a.width += len(c.Events)
		var k *topdown.Keyed
		if c.Tree != nil {
			k = topdown.NewKeyed(c.Tree, c.Events, c.Params)
			if missing := k.Missing(c.Events); len(missing) > 0 {
				logger.Warn("per-cgroup Top-Down not computed: the tree's inputs are not all attributed", "pmu", c.PMU, "missing", missing)
				k = nil
			}
		}
		a.keyed = append(a.keyed, k)
	}
	opts.Rank = rank
	a.rollup = NewRollup(a.width)
	a.table = New(a.width, opts)
	a.unattr = New(a.width, Options{MaxSeries: 1, Grace: time.Duration(1<<63 - 1)})
	return a
}

// Width is how many flattened counts a cgroup has: every class's events.
func (a *Attribution) Width() int { return a.width }

// Update folds in one read (c) made at now and returns the series: every
// cgroup's totals with its descendants', the bounded table, Top-Down, and
// Tracked less the cgroups removed now, which src forgets. Switches and
// Errors are the kernel side's to fill.
func (a *Attribution) Update(now time.Time, c model.CgroupCounts, src Source) model.CgroupSnapshot {
	// The kernel credited each task's own cgroup; the ancestors get their
	// descendants' counts here, by the ancestry the kernel recorded.
	readings := a.rollup.Update(c.Own, src.Ancestors)
	a.table.Update(now, readings, src.Path, c.Current)
	if c.Unattributed != nil {
		a.unattr.Update(now, map[uint64][]model.CgroupReading{0: c.Unattributed}, func(uint64) (string, bool) { return "", true }, true)
	}
	forgotten := 0
	if c.Current {
		forgotten = a.forgetRemoved(readings, src)
	}
	series := a.table.Series()
	a.topdownStep(series)
	return a.snapshot(series, c.Placed, c.Tracked-forgotten)
}

// forgetRemoved lets go of the cgroups no longer in the hierarchy (a walk
// or check made after the read said so): their last counts are in the
// table and in their ancestors' totals; the rollup and the kernel's map
// forget them. It returns how many left the kernel's map.
func (a *Attribution) forgetRemoved(readings map[uint64][]model.CgroupReading, src Source) (forgotten int) {
	var gone []uint64
	for id := range readings {
		if _, ok := src.Path(id); !ok {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		a.rollup.Forget(id)
		if src.Forget(id) {
			forgotten++
		}
	}
	return forgotten
}

// topdownStep evaluates each class's tree on every series' counts since the
// previous step.
func (a *Attribution) topdownStep(series []Series) {
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
				k.Add(s.ID, delta[a.offsets[ci]:a.offsets[ci]+len(a.classes[ci].Events)])
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

// snapshot is the series as the exporter reads them.
func (a *Attribution) snapshot(series []Series, placed []bool, tracked int) model.CgroupSnapshot {
	s := model.CgroupSnapshot{Tracked: tracked}
	for _, k := range a.keyed {
		s.TopDown = s.TopDown || k != nil
	}
	for _, sr := range series {
		c := model.Cgroup{Path: sr.Path, Events: a.events(sr.Counts, placed)}
		if sr.Path != Other && sr.Path != Gone {
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
	s.Unattributed = a.events(make([]float64, a.width), placed)
	for _, sr := range a.unattr.Series() {
		s.Unattributed = a.events(sr.Counts, placed)
	}
	return s
}

// events sums flattened counts by event name over classes: the visible
// ones that were ever placed.
func (a *Attribution) events(counts []float64, placed []bool) []model.Count {
	sums := map[string]float64{}
	for ci, c := range a.classes {
		for i, name := range c.Events {
			if j := a.offsets[ci] + i; (i >= len(c.Hidden) || !c.Hidden[i]) && j < len(placed) && placed[j] {
				sums[name] += counts[j]
			}
		}
	}
	out := make([]model.Count, 0, len(sums))
	for n, v := range sums {
		out = append(out, model.Count{Event: n, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Event < out[j].Event })
	return out
}
