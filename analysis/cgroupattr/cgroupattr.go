// Package cgroupattr turns the per-cgroup cumulative readings of the eBPF
// attribution into a bounded set of counter series: each cgroup's counts are
// scaled per interval by its own enabled/running times (as the node's are),
// at most MaxSeries cgroups get series of their own and the rest are summed
// into "other", and a cgroup that disappears keeps its series for a grace
// period, then is dropped. It is pure: readings in, series out.
package cgroupattr

import (
	"sort"
	"time"

	"github.com/pmu-exporter/pmu_exporter/formats/readformat"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Other names the series holding every cgroup beyond MaxSeries.
const Other = "other"

// Gone names the series holding the cgroups that were gone by the first
// read that held them (a cgroup that lived less than a read interval):
// their paths can no longer be read, so no series of their own can name
// them. Their counts are in their ancestors' too, as every cgroup's are.
const Gone = "gone"

// Options bound the table.
type Options struct {
	MaxSeries int           // cgroups with series of their own; the rest go to Other
	Grace     time.Duration // how long a vanished cgroup keeps its series
	// Rank lists the count indexes whose sum ranks cgroups for a series of
	// their own (largest first): the CPU-time events, on every core type.
	// Empty: index 0.
	Rank []int
}

type entry struct {
	path     string
	prev     []model.CgroupReading
	total    []float64 // scaled, cumulative
	shown    bool      // has its own series (kept until it vanishes: no flapping)
	unnamed  bool      // gone before its path was read: counted into Gone
	born     time.Time
	lastSeen time.Time
}

// Table follows cgroups across updates.
type Table struct {
	opts   Options
	events int
	byID   map[uint64]*entry
	other  []float64 // cumulative counts of the cgroups folded into Other
	gone   []float64 // cumulative counts of the cgroups gone before named
}

// New makes a table for events events per cgroup.
func New(events int, opts Options) *Table {
	return &Table{opts: opts, events: events, byID: map[uint64]*entry{}, other: make([]float64, events), gone: make([]float64, events)}
}

// Update folds in one read of every cgroup the kernel holds: readings by
// cgroup id, and path resolves an id to its path ("" and false once the
// cgroup is gone). current says whether the hierarchy was read after the
// readings: then an id path cannot resolve is a cgroup removed, whose
// counts go to Gone; if not, it waits for a later update.
func (t *Table) Update(now time.Time, readings map[uint64][]model.CgroupReading, path func(uint64) (string, bool), current bool) {
	for id, rs := range readings {
		e := t.byID[id]
		if e == nil {
			p, ok := path(id)
			if !ok && !current {
				continue // perhaps a cgroup the walk did not reach: later
			}
			// Gone before we first saw it: nothing to label it with, so
			// its counts go to Gone, followed as any cgroup's are.
			e = &entry{path: p, unnamed: !ok, prev: make([]model.CgroupReading, t.events), total: make([]float64, t.events), born: now}
			t.byID[id] = e
		}
		e.lastSeen = now
		for i := range min(len(rs), t.events) {
			r, p := rs[i], e.prev[i]
			if r.Counter < p.Counter || r.Enabled < p.Enabled || r.Running < p.Running {
				p = model.CgroupReading{} // the kernel's entry was recreated: start over
			}
			if dr := r.Running - p.Running; dr > 0 {
				d := float64(readformat.Scale(r.Counter-p.Counter, r.Enabled-p.Enabled, dr))
				e.total[i] += d
				switch {
				case e.unnamed:
					t.gone[i] += d
				case !e.shown:
					t.other[i] += d
				}
			}
			e.prev[i] = r
		}
	}
	// Vanished cgroups: kept through the grace period, then dropped.
	for id, e := range t.byID {
		if _, present := readings[id]; present {
			continue
		}
		if now.Sub(e.lastSeen) > t.opts.Grace {
			delete(t.byID, id)
		}
	}
	t.promote(now)
}

// promote gives series to the largest not-yet-shown cgroups while there is
// room. A cgroup seen for the first time in this update takes its counts out
// of Other (not exported yet); an older one leaves its counts so far in Other,
// whose counter must not go down, and starts its own series from zero.
func (t *Table) promote(now time.Time) {
	shown := 0
	var waiting []uint64
	for id, e := range t.byID {
		switch {
		case e.shown:
			shown++
		case !e.unnamed:
			waiting = append(waiting, id)
		}
	}
	sort.Slice(waiting, func(i, j int) bool {
		a, b := t.rank(t.byID[waiting[i]]), t.rank(t.byID[waiting[j]])
		if a != b {
			return a > b
		}
		return waiting[i] < waiting[j]
	})
	for _, id := range waiting {
		if shown >= t.opts.MaxSeries {
			break
		}
		e := t.byID[id]
		e.shown = true
		if e.born.Equal(now) {
			for i, v := range e.total {
				t.other[i] -= v
			}
		} else {
			clear(e.total)
		}
		shown++
	}
}

func (t *Table) rank(e *entry) float64 {
	if len(t.opts.Rank) == 0 {
		return e.total[0]
	}
	var r float64
	for _, i := range t.opts.Rank {
		r += e.total[i]
	}
	return r
}

// Series is one exported cgroup (or Other) with its cumulative counts.
type Series struct {
	ID     uint64 // 0 for Other
	Path   string
	Counts []float64
}

// Series returns the cgroups with series of their own, then Other and
// Gone (each only once something was folded into it).
func (t *Table) Series() []Series {
	var out []Series
	for id, e := range t.byID {
		if e.shown {
			out = append(out, Series{ID: id, Path: e.path, Counts: append([]float64(nil), e.total...)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	for _, folded := range []struct {
		path   string
		counts []float64
	}{{Other, t.other}, {Gone, t.gone}} {
		for _, v := range folded.counts {
			if v > 0 {
				out = append(out, Series{Path: folded.path, Counts: append([]float64(nil), folded.counts...)})
				break
			}
		}
	}
	return out
}
