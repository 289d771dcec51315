package cgroupattr

import "github.com/pmu-exporter/pmu_exporter/model"

// Rollup sums each cgroup's own readings into its ancestors'. The kernel
// credits a task's own cgroup only, which keeps the work at a context
// switch to one map update; the ancestors' totals are made here, once per
// read, from each cgroup's change since the previous read. Totals only
// grow: a cgroup that is forgotten (removed) leaves what it gave its
// ancestors with them.
type Rollup struct {
	events int
	own    map[uint64][]model.CgroupReading // each cgroup's own readings at the previous Update
	total  map[uint64][]model.CgroupReading // its own and its descendants', cumulative
}

// NewRollup makes a rollup of events readings per cgroup.
func NewRollup(events int) *Rollup {
	return &Rollup{events: events, own: map[uint64][]model.CgroupReading{}, total: map[uint64][]model.CgroupReading{}}
}

// Update folds in one read of every cgroup's own cumulative readings (own,
// by cgroup id), each reaching itself and the ancestors ancestors(id)
// gives, and returns every cgroup's totals so far: the cgroups read now or
// before, and their ancestors. The returned map is the rollup's own, valid
// until the next Update or Forget.
func (r *Rollup) Update(own map[uint64][]model.CgroupReading, ancestors func(uint64) []uint64) map[uint64][]model.CgroupReading {
	for id, rs := range own {
		prev := r.own[id]
		if prev == nil {
			prev = make([]model.CgroupReading, r.events)
			r.own[id] = prev
		}
		delta := make([]model.CgroupReading, r.events)
		for i := range min(len(rs), r.events) {
			p := prev[i]
			if rs[i].Counter < p.Counter || rs[i].Enabled < p.Enabled || rs[i].Running < p.Running {
				p = model.CgroupReading{} // the kernel's entry was recreated: it counts from zero
			}
			delta[i] = model.CgroupReading{Counter: rs[i].Counter - p.Counter, Enabled: rs[i].Enabled - p.Enabled, Running: rs[i].Running - p.Running}
			prev[i] = rs[i]
		}
		r.credit(id, delta)
		for _, a := range ancestors(id) {
			if a != id {
				r.credit(a, delta)
			}
		}
	}
	return r.total
}

// credit adds delta to id's total.
func (r *Rollup) credit(id uint64, delta []model.CgroupReading) {
	t := r.total[id]
	if t == nil {
		t = make([]model.CgroupReading, r.events)
		r.total[id] = t
	}
	for i, d := range delta {
		t[i].Counter += d.Counter
		t[i].Enabled += d.Enabled
		t[i].Running += d.Running
	}
}

// Forget drops a removed cgroup: its own readings and its total. What it
// gave its ancestors stays theirs.
func (r *Rollup) Forget(id uint64) {
	delete(r.own, id)
	delete(r.total, id)
}
