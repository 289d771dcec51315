// Package watchbudget keeps what hardware watchpoints cost a workload within
// a share of the CPU time the workload runs: every trap costs its thread a
// measured amount (kernel/watch.TrapCost), so a target may trap until
// traps × cost reaches budget × its CPU time since it was first watched
// (plus a small allowance, so that a target just watched can start). A
// sample that would arm watchpoints in a target over its budget is used
// without them (sample-only detection, or no reuse slot), and counted.
// Traps already armed still come; the next arms wait until the target has
// run long enough to pay for them.
package watchbudget

// Budget is the budget of each target (a process).
type Budget struct {
	budget, cost, allowance float64
	targets                 map[uint32]*target
	// Totals of targets gone, so that exported counters never go down.
	gone Totals
}

type target struct {
	cpu     float64 // its CPU seconds at the last reading
	read    bool    // cpu was read (before the first reading, only the allowance)
	allowed uint64  // samples allowed to arm
	Totals
}

// Totals are what the budget did.
type Totals struct {
	CPU    float64 // seconds the targets ran while watched
	Spent  float64 // seconds their traps cost them (traps × cost)
	Traps  uint64
	Denied uint64 // samples that would have armed but were over budget
}

// Allowance is the traps a target just watched may make before it has run
// long enough to pay for them (live, and in a governed trace replay).
const Allowance = 16

// New governs traps costing cost seconds each within budget (a share of
// the target's CPU time, 0.01 for 1%), allowing each target allowance
// traps ahead of its budget.
func New(budget, cost float64, allowance int) *Budget {
	return &Budget{budget: budget, cost: cost, allowance: float64(allowance) * cost, targets: map[uint32]*target{}}
}

// Ran tells the budget that pid has run cpu seconds in all (its
// cumulative user + system time).
func (g *Budget) Ran(pid uint32, cpu float64) {
	t := g.target(pid)
	if !t.read { // the time it ran before it was watched does not count
		t.cpu, t.read = cpu, true
	}
	if cpu > t.cpu {
		t.CPU += cpu - t.cpu
		t.cpu = cpu
	}
}

func (g *Budget) target(pid uint32) *target {
	t := g.targets[pid]
	if t == nil {
		t = &target{}
		g.targets[pid] = t
	}
	return t
}

// Allow says whether pid may arm a watchpoint now: what its traps cost so
// far and one more is within its budget. A no is counted as denied.
func (g *Budget) Allow(pid uint32) bool {
	t := g.target(pid)
	if !g.Over(pid) {
		t.allowed++
		return true
	}
	t.Denied++
	return false
}

// Over says whether pid's traps have spent its budget: the traps of one
// more allowed sample would not fit. A sample arms watchpoints in one
// thread or several, each trapping once at most (kernel/watch), and
// how many trap the workload decides, so one more is expected to cost
// what the allowed samples cost so far on average, one trap at least. Its
// watchpoints should then be disarmed: an armed one would still trap.
func (g *Budget) Over(pid uint32) bool {
	t := g.targets[pid]
	if t == nil {
		return false
	}
	next := 1.0
	if t.allowed > 0 {
		next = max(next, float64(t.Traps)/float64(t.allowed))
	}
	return (float64(t.Traps)+next)*g.cost > g.budget*t.CPU+g.allowance+1e-12
}

// Trapped charges pid for n traps.
func (g *Budget) Trapped(pid uint32, n uint64) {
	t := g.target(pid)
	t.Traps += n
	t.Spent = float64(t.Traps) * g.cost
}

// Forget drops a target that is gone, keeping its totals.
func (g *Budget) Forget(pid uint32) {
	if t := g.targets[pid]; t != nil {
		g.gone.add(t.Totals)
		delete(g.targets, pid)
	}
}

func (a *Totals) add(b Totals) {
	a.CPU += b.CPU
	a.Spent += b.Spent
	a.Traps += b.Traps
	a.Denied += b.Denied
}

// Totals sums every target's, present and gone.
func (g *Budget) Totals() Totals {
	out := g.gone
	for _, t := range g.targets {
		out.add(t.Totals)
	}
	return out
}

// Share and Cost are the budget's settings: the share of a target's
// CPU time its traps may cost, and what one trap costs (seconds).
func (g *Budget) Share() float64 { return g.budget }
func (g *Budget) Cost() float64  { return g.cost }
