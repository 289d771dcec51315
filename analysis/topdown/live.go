package topdown

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// LiveGroups resolves a tree's groups into hidden counting-engine groups named
// analysis/topdown/<tree>/<n>, on the core PMU corePMU ("" where the host has one).
func LiveGroups(d *metric.Definition, pmus []*pmu.PMU, corePMU string) ([]eventspec.Group, error) {
	spec := map[string]string{}
	for _, e := range d.Events {
		spec[e.Name] = e.Spec
	}
	var out []eventspec.Group
	for i, g := range d.Groups {
		gs := eventspec.Group{Name: fmt.Sprintf("topdown/%s/%d", d.Name, i), Hidden: true}
		for _, name := range g {
			ev, err := resolveOn(spec[name], pmus, corePMU)
			if err != nil {
				return nil, fmt.Errorf("%s: event %s: %w", d.Name, name, err)
			}
			ev.Name = name // the tree's input name, whatever name= said
			gs.Events = append(gs.Events, ev)
		}
		out = append(out, gs)
	}
	return out, nil
}

// resolveOn resolves one event of a tree on the core PMU corePMU. Trees write
// raw core events as cpu/.../; a hybrid host has no PMU named cpu, and there
// they count on corePMU. Generic and alias events that exist on several core
// PMUs take corePMU's variant.
func resolveOn(text string, pmus []*pmu.PMU, corePMU string) (eventspec.Event, error) {
	s, err := eventspec.Parse(text)
	if err != nil {
		return eventspec.Event{}, err
	}
	if s.PMU == "cpu" && corePMU != "" && !slices.ContainsFunc(pmus, func(p *pmu.PMU) bool { return p.Name == "cpu" }) {
		s.PMU = corePMU
	}
	evs, err := s.Resolve(pmus)
	if err != nil {
		return eventspec.Event{}, err
	}
	if len(evs) == 1 {
		return evs[0], nil
	}
	for _, e := range evs {
		if e.PMU == corePMU {
			return e, nil
		}
	}
	return eventspec.Event{}, errors.New("it exists on several core PMUs; pick one")
}

// Live turns successive counting-engine snapshots into Top-Down slot counters:
// per CPU and interval it evaluates the tree on the interval's counts and adds
// each node's fraction times the interval's slots, so sums over CPUs and time
// stay exact and every ratio is left to PromQL.
type Live struct {
	tree   *metric.Tree
	params map[string]float64
	// where each tree input is read: the first group that counts it
	source map[string][2]string // input -> {group, event}
	// inputs are source's inputs in name order, with their slots: what
	// each CPU's pass reads, by index rather than by name.
	inputs []liveInput
	// metrics are the tree's metrics in evaluation order (Tree.Metrics
	// copies them), and nodes the indexes of those of level 1 and deeper.
	metrics []metric.Metric
	nodeIdx []int
	// homes are the groups other than their inputs' first that hold all
	// of a non-approximate node's events, with those nodes: such a node is
	// evaluated on its own group's counts, so that its ratios are of one
	// counter schedule (level 3's numerators beside their own cycles).
	homes    []homeGroup
	homePrev map[int][]uint64 // per CPU, as prev for the home groups' events (offsets in homes)
	homeOn   map[int][]uint64 // per CPU, as prevOn for each home group
	// homeVal and homeRan are homeValues' results, by metric index: a
	// node's value on its home group's counts, and whether that group
	// ran (homeSet says which indexes it set this CPU).
	homeVal []float64
	homeRan []bool
	homeSet []bool
	scratch map[int]*metric.Evaluator // per CPU, for the home groups' passes
	evals   map[int]*metric.Evaluator
	prev    map[int][]uint64    // per CPU, per input: its total at the last update
	prevOn  map[groupCPU]uint64 // a group's running ns on a CPU at the last update
	perCPU  []map[int]uint64    // per input, this update's totals by CPU (reused)
	runs    []map[int]uint64    // per input, its group's running ns by CPU (reused)

	mu    sync.Mutex
	slots map[int]float64   // per CPU
	nodes map[int][]float64 // per CPU, per metric (indexes of metrics)
	// skipped counts the CPU intervals whose value of a node (or of slots)
	// was left out, by reason: see NotComputed.
	skipped map[NotComputed]uint64
}

// NotComputed names a node ("slots" for the slots themselves) and why an
// interval's value of it was left out: ReasonNegative (a slot counter must
// never go down) or ReasonDivisionByZero (every input was counted, yet the
// formula divided by zero).
type NotComputed struct{ Node, Reason string }

// The reasons of NotComputed.
const (
	ReasonNegative       = "negative"
	ReasonDivisionByZero = "division_by_zero"
)

// NewLive follows groups (from LiveGroups) for tree t; params holds smt_on,
// #slots and the like.
func NewLive(t *metric.Tree, groups []eventspec.Group, params map[string]float64) *Live {
	l := &Live{tree: t, params: params, source: map[string][2]string{}, evals: map[int]*metric.Evaluator{},
		prev: map[int][]uint64{}, prevOn: map[groupCPU]uint64{}, slots: map[int]float64{}, nodes: map[int][]float64{},
		skipped: map[NotComputed]uint64{}, metrics: t.Metrics()}
	for _, g := range groups {
		for _, ev := range g.Events {
			if _, ok := l.source[ev.Name]; !ok {
				l.source[ev.Name] = [2]string{g.Name, ev.Name}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(l.source)) {
		l.inputs = append(l.inputs, liveInput{name: name, slot: t.Input(name)})
	}
	for i, m := range l.metrics {
		if m.Level >= 1 {
			l.nodeIdx = append(l.nodeIdx, i)
		}
	}
	l.perCPU, l.runs = make([]map[int]uint64, len(l.inputs)), make([]map[int]uint64, len(l.inputs))
	l.scratch, l.homePrev, l.homeOn = map[int]*metric.Evaluator{}, map[int][]uint64{}, map[int][]uint64{}
	byName := map[string]int{}
	for i, m := range l.metrics {
		byName[m.Name] = i
	}
	homes := homeGroups(t, groups, l.source)
	offset := 0
	for _, g := range groups {
		nodes, home := homes[g.Name]
		if !home {
			continue
		}
		hg := homeGroup{name: g.Name, plan: t.Closure(nodes), offset: offset}
		for _, n := range nodes {
			hg.nodes = append(hg.nodes, byName[n])
		}
		for _, e := range g.Events {
			if i := t.Input(e.Name); i >= 0 {
				hg.events = append(hg.events, liveInput{name: e.Name, slot: i})
			}
		}
		hg.perCPU = make([]map[int]uint64, len(hg.events))
		offset += len(hg.events)
		l.homes = append(l.homes, hg)
	}
	l.homeVal, l.homeRan, l.homeSet = make([]float64, len(l.metrics)), make([]bool, len(l.metrics)), make([]bool, len(l.metrics))
	return l
}

// homeGroups finds, for each non-approximate node of t, the first group
// that counts every event it rests on, where some of those events are
// read from another group: the node's home, whose counts it is then
// evaluated on.
func homeGroups(t *metric.Tree, groups []eventspec.Group, source map[string][2]string) map[string][]string {
	homes := map[string][]string{}
	for _, m := range t.Metrics() {
		events := t.EventsOf(m.Name)
		if m.Level < 1 || m.Approximate || len(events) == 0 {
			continue
		}
		for _, g := range groups {
			if !slices.ContainsFunc(events, func(e string) bool {
				return !slices.ContainsFunc(g.Events, func(ev eventspec.Event) bool { return ev.Name == e })
			}) {
				if slices.ContainsFunc(events, func(e string) bool { return source[e][0] != g.Name }) {
					homes[g.Name] = append(homes[g.Name], m.Name)
				}
				break
			}
		}
	}
	return homes
}

// homeGroup is a group other than their inputs' first that holds all of
// some exact nodes' events: they are evaluated on its own counts.
type homeGroup struct {
	name   string
	nodes  []int            // the nodes' metric indexes
	plan   []int            // their evaluation plan (Tree.Closure)
	events []liveInput      // the tree's events it counts
	offset int              // where its events' previous totals start in homePrev
	perCPU []map[int]uint64 // per event, this update's totals by CPU
	run    map[int]uint64   // this update's running ns by CPU; nil: split or absent
}

// liveInput is a tree input Live reads: its name and evaluator slot.
type liveInput struct {
	name string
	slot int
}

// groupCPU is a counting group on a CPU.
type groupCPU struct {
	group string
	cpu   int
}

// Update folds in the interval since the previous snapshot.
func (l *Live) Update(s model.Snapshot) {
	totals := map[[2]string]model.EventTotals{}
	for _, e := range s.Events {
		totals[[2]string{e.Group, e.Event}] = e
	}
	running := map[string]map[int]uint64{}
	for _, g := range s.Groups {
		running[g.Name] = g.RunningNS
	}
	order := l.resolve(totals, running)

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cpu := range order {
		ev := l.evals[cpu]
		if ev == nil {
			ev = l.tree.NewEvaluator()
			for name, v := range l.params {
				if i := l.tree.Input(name); i >= 0 {
					ev.Set(i, v)
				}
			}
			l.evals[cpu] = ev
			l.prev[cpu] = make([]uint64, len(l.inputs))
		}
		prev := l.prev[cpu]
		ev.Reset()
		complete := true // every input of the tree was counted this interval
		for i, in := range l.inputs {
			cur, ok := l.perCPU[i][cpu]
			if !ok || l.runs[i][cpu] == l.prevOn[groupCPU{l.source[in.name][0], cpu}] {
				complete = false
				continue // the group did not run this interval: the input is missing
			}
			ev.Set(in.slot, float64(cur-prev[i]))
			prev[i] = cur
		}
		l.homeValues(cpu, ev)
		for i, in := range l.inputs {
			if r, ok := l.runs[i][cpu]; ok {
				l.prevOn[groupCPU{l.source[in.name][0], cpu}] = r
			}
		}
		ev.Eval()
		l.accumulate(cpu, ev, complete)
	}
}

// resolve points each input (and each home group's event) at this
// snapshot's totals by CPU, following groups the engine split, and
// returns the CPUs that counted any, in order.
func (l *Live) resolve(totals map[[2]string]model.EventTotals, running map[string]map[int]uint64) []int {
	cpus := map[int]bool{}
	for i, in := range l.inputs {
		src := l.source[in.name]
		// A group the PMU could not schedule together is counted one event
		// per group, named <group>/<event> (perfcount splits it): read
		// those instead, from their own start.
		if _, ok := totals[src]; !ok {
			if split := [2]string{src[0] + "/" + src[1], src[1]}; totals[split].PerCPU != nil {
				l.source[in.name] = split
				src = split
				for _, prev := range l.prev {
					prev[i] = 0
				}
			}
		}
		l.perCPU[i], l.runs[i] = totals[src].PerCPU, running[src[0]]
		for cpu := range l.perCPU[i] {
			cpus[cpu] = true
		}
	}
	for h := range l.homes {
		hg := &l.homes[h]
		hg.run = running[hg.name]
		for j, e := range hg.events {
			hg.perCPU[j] = totals[[2]string{hg.name, e.name}].PerCPU
		}
	}
	order := make([]int, 0, len(cpus))
	for c := range cpus {
		order = append(order, c)
	}
	sort.Ints(order)
	return order
}

// accumulate adds a CPU's evaluated interval to its slot counters: each
// node's fraction (on its home group's counts where it has one) times
// the interval's slots, leaving out what invalid says cannot be added.
func (l *Live) accumulate(cpu int, ev *metric.Evaluator, complete bool) {
	slots := ev.Value("slots")
	if r := l.invalid(slots, complete); r != "" {
		l.skipped[NotComputed{"slots", r}]++
	}
	if math.IsNaN(slots) || slots <= 0 {
		return
	}
	l.slots[cpu] += slots
	if l.nodes[cpu] == nil {
		l.nodes[cpu] = make([]float64, len(l.metrics))
	}
	acc := l.nodes[cpu]
	for _, i := range l.nodeIdx {
		v := ev.ValueAt(i)
		if l.homeSet[i] {
			if !l.homeRan[i] {
				continue
			}
			v = l.homeVal[i]
		}
		if r := l.invalid(v, complete); r != "" {
			l.skipped[NotComputed{l.metrics[i].Name, r}]++
			continue
		}
		if !math.IsNaN(v) {
			acc[i] += v * slots
		}
	}
}

// homeValues evaluates the nodes of each home group on that group's own
// counts this interval (the other inputs as ev has them, before ev is
// evaluated) into homeVal, with homeRan false for those whose group did
// not run (not computed, as a missing input). A group the engine split
// has no one schedule, and is left to ev.
func (l *Live) homeValues(cpu int, ev *metric.Evaluator) {
	clear(l.homeSet)
	if len(l.homes) == 0 {
		return
	}
	prev, on := l.homePrev[cpu], l.homeOn[cpu]
	if prev == nil {
		last := l.homes[len(l.homes)-1]
		prev, on = make([]uint64, last.offset+len(last.events)), make([]uint64, len(l.homes))
		l.homePrev[cpu], l.homeOn[cpu] = prev, on
	}
	sc := l.scratch[cpu]
	if sc == nil {
		sc = l.tree.NewEvaluator()
		l.scratch[cpu] = sc
	}
	for h := range l.homes {
		hg := &l.homes[h]
		run, ok := hg.run[cpu]
		if !ok {
			continue // split, or not on this CPU: the first groups' counts stand
		}
		ran := run != on[h]
		on[h] = run
		sc.CopyInputs(ev)
		for j, e := range hg.events {
			cur, counted := hg.perCPU[j][cpu]
			if !counted {
				continue // as ev has it
			}
			v := float64(cur - prev[hg.offset+j])
			prev[hg.offset+j] = cur
			if !ran {
				v = math.NaN() // the group did not run: its nodes are not computed
			}
			sc.Set(e.slot, v)
		}
		sc.EvalSome(hg.plan)
		for _, n := range hg.nodes {
			l.homeVal[n], l.homeRan[n], l.homeSet[n] = sc.ValueAt(n), ran, true
		}
	}
}

// invalid says why v cannot be added to a counter: negative, or NaN although
// every input was there (only a division by zero makes one then). A NaN
// from a missing input is not counted: that group simply did not run.
func (l *Live) invalid(v float64, complete bool) string {
	switch {
	case v < 0:
		return ReasonNegative
	case math.IsNaN(v) && complete:
		return ReasonDivisionByZero
	}
	return ""
}

// NotComputed returns, per node and reason, the CPU intervals whose value
// was left out of the counters.
func (l *Live) NotComputed() map[NotComputed]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.skipped)
}

// Node is one Top-Down node's accumulated slots (model.Node).
type Node = model.Node

// Totals returns the slots accumulated so far, per node and in all, summed over
// CPUs, and the containment violations per parent.
func (l *Live) Totals() (slots float64, nodes []Node, violations map[string]uint64) {
	perCPU, byCPU, violations := l.TotalsPerCPU()
	slots, nodes = SumCPUs(perCPU, byCPU)
	if nodes == nil { // no CPU yet: every node at zero
		for _, i := range l.nodeIdx {
			m := &l.metrics[i]
			nodes = append(nodes, Node{Name: m.Name, Parent: m.Parent, Level: m.Level, ChildrenEstimated: m.ChildrenEstimated})
		}
	}
	return slots, nodes, violations
}

// SumCPUs adds per-CPU slot counters up; every CPU's nodes are in the same
// (tree) order.
func SumCPUs(perCPU map[int]float64, byCPU map[int][]Node) (slots float64, nodes []Node) {
	for cpu, s := range perCPU {
		slots += s
		if nodes == nil {
			nodes = slices.Clone(byCPU[cpu])
			continue
		}
		for i, n := range byCPU[cpu] {
			nodes[i].Slots += n.Slots
		}
	}
	return slots, nodes
}

// TotalsPerCPU is Totals for each CPU.
func (l *Live) TotalsPerCPU() (slots map[int]float64, nodes map[int][]Node, violations map[string]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	slots, nodes, violations = map[int]float64{}, map[int][]Node{}, map[string]uint64{}
	for cpu, s := range l.slots {
		slots[cpu] = s
		for _, i := range l.nodeIdx {
			m := &l.metrics[i]
			nodes[cpu] = append(nodes[cpu], Node{Name: m.Name, Parent: m.Parent, Level: m.Level, ChildrenEstimated: m.ChildrenEstimated, Slots: l.nodes[cpu][i]})
		}
	}
	for _, ev := range l.evals {
		for p, n := range ev.Violations {
			violations[p] += n
		}
	}
	return slots, nodes, violations
}
