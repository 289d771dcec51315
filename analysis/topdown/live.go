package topdown

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
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
	// homes are the groups other than their inputs' first that hold all
	// of a non-approximate node's events, with those nodes: such a node is
	// evaluated on its own group's counts, so that its ratios are of one
	// counter schedule (level 3's numerators beside their own cycles).
	homes      map[string][]string // group -> nodes
	plans      map[string][]int    // group -> its nodes' evaluation plan
	homeEvents map[string][]string // group -> the tree's events it counts
	homePrev   map[homeKey]uint64  // as prev, for the home groups' own counts
	homeOn     map[homeKey]uint64  // as prevOn, for the home groups
	homeOut    map[string]float64  // homeValues' results, reused
	homeNotRun map[string]bool
	scratch    map[int]*metric.Evaluator // per CPU, for the home groups' passes
	evals      map[int]*metric.Evaluator
	prev       map[string]uint64 // group|event|cpu -> total at the last update
	prevOn     map[string]uint64 // group|cpu -> running ns at the last update

	mu    sync.Mutex
	slots map[int]float64            // per CPU
	nodes map[int]map[string]float64 // per CPU, per metric
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
		prev: map[string]uint64{}, prevOn: map[string]uint64{}, slots: map[int]float64{}, nodes: map[int]map[string]float64{},
		skipped: map[NotComputed]uint64{}}
	for _, g := range groups {
		for _, ev := range g.Events {
			if _, ok := l.source[ev.Name]; !ok {
				l.source[ev.Name] = [2]string{g.Name, ev.Name}
			}
		}
	}
	l.homes, l.scratch = homeGroups(t, groups, l.source), map[int]*metric.Evaluator{}
	l.plans = map[string][]int{}
	for g, nodes := range l.homes {
		l.plans[g] = t.Closure(nodes)
	}
	l.homePrev, l.homeOn, l.homeEvents = map[homeKey]uint64{}, map[homeKey]uint64{}, map[string][]string{}
	for _, g := range groups {
		if _, home := l.homes[g.Name]; home {
			for _, e := range g.Events {
				if t.Input(e.Name) >= 0 {
					l.homeEvents[g.Name] = append(l.homeEvents[g.Name], e.Name)
				}
			}
		}
	}
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

// Update folds in the interval since the previous snapshot.
func (l *Live) Update(s model.Snapshot) {
	totals := map[[2]string]model.EventTotals{}
	for _, e := range s.Events {
		totals[[2]string{e.Group, e.Event}] = e
	}
	running := map[string]map[int]uint64{}
	cpus := map[int]bool{}
	for _, g := range s.Groups {
		running[g.Name] = g.RunningNS
	}
	// A group the PMU could not schedule together is counted one event per
	// group, named <group>/<event> (perfcount splits it): read those instead.
	for input, src := range l.source {
		if _, ok := totals[src]; !ok {
			if split := [2]string{src[0] + "/" + src[1], src[1]}; totals[split].PerCPU != nil {
				l.source[input] = split
				src = split
			}
		}
		for cpu := range totals[src].PerCPU {
			cpus[cpu] = true
		}
	}
	order := make([]int, 0, len(cpus))
	for c := range cpus {
		order = append(order, c)
	}
	sort.Ints(order)

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
		}
		ev.Reset()
		complete := true // every input of the tree was counted this interval
		for input, src := range l.source {
			key := src[0] + "|" + src[1] + "|" + strconv.Itoa(cpu)
			runKey := src[0] + "|" + strconv.Itoa(cpu)
			cur, ok := totals[src].PerCPU[cpu]
			run := running[src[0]][cpu]
			if !ok || run == l.prevOn[runKey] {
				complete = false
				continue // the group did not run this interval: the input is missing
			}
			ev.Set(l.tree.Input(input), float64(cur-l.prev[key]))
			l.prev[key] = cur
		}
		home, homeNotRun := l.homeValues(cpu, ev, totals, running)
		for _, src := range l.source {
			runKey := src[0] + "|" + strconv.Itoa(cpu)
			if r, ok := running[src[0]][cpu]; ok {
				l.prevOn[runKey] = r
			}
		}
		ev.Eval()
		slots := ev.Value("slots")
		if r := l.invalid(slots, complete); r != "" {
			l.skipped[NotComputed{"slots", r}]++
		}
		if math.IsNaN(slots) || slots <= 0 {
			continue
		}
		l.slots[cpu] += slots
		if l.nodes[cpu] == nil {
			l.nodes[cpu] = map[string]float64{}
		}
		for _, m := range l.tree.Metrics() {
			if m.Level < 1 {
				continue
			}
			v := ev.Value(m.Name)
			if homeNotRun[m.Name] {
				continue
			}
			if hv, ok := home[m.Name]; ok {
				v = hv
			}
			if r := l.invalid(v, complete); r != "" {
				l.skipped[NotComputed{m.Name, r}]++
				continue
			}
			if !math.IsNaN(v) {
				l.nodes[cpu][m.Name] += v * slots
			}
		}
	}
}

// homeValues evaluates the nodes of each home group on that group's own
// counts this interval (the other inputs as ev has them, before ev is
// evaluated): their values by name, and those whose group did not run
// (not computed, as a missing input). A group the engine split has no one
// schedule, and is left to ev.
func (l *Live) homeValues(cpu int, ev *metric.Evaluator, totals map[[2]string]model.EventTotals, running map[string]map[int]uint64) (out map[string]float64, notRun map[string]bool) {
	if len(l.homes) == 0 {
		return nil, nil
	}
	if l.homeOut == nil {
		l.homeOut, l.homeNotRun = map[string]float64{}, map[string]bool{}
	}
	out, notRun = l.homeOut, l.homeNotRun // reused: read before the next CPU's
	clear(out)
	clear(notRun)
	for group, nodes := range l.homes {
		run, ok := running[group][cpu]
		if !ok {
			continue // split, or not on this CPU: the first groups' counts stand
		}
		on := homeKey{group, "", cpu}
		ran := run != l.homeOn[on]
		l.homeOn[on] = run
		sc := l.scratch[cpu]
		if sc == nil {
			sc = l.tree.NewEvaluator()
			l.scratch[cpu] = sc
		}
		sc.CopyInputs(ev)
		for _, e := range l.homeEvents[group] {
			cur, counted := totals[[2]string{group, e}].PerCPU[cpu]
			if !counted {
				continue // as ev has it
			}
			key := homeKey{group, e, cpu}
			v := float64(cur - l.homePrev[key])
			l.homePrev[key] = cur
			if !ran {
				v = math.NaN() // the group did not run: its nodes are not computed
			}
			sc.Set(l.tree.Input(e), v)
		}
		sc.EvalSome(l.plans[group])
		for _, n := range nodes {
			out[n], notRun[n] = sc.Value(n), !ran
		}
	}
	return out, notRun
}

// homeKey is a home group's event (or, "", its running time) on a CPU.
type homeKey struct {
	group, event string
	cpu          int
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
		for _, m := range l.tree.Metrics() {
			if m.Level >= 1 {
				nodes = append(nodes, Node{Name: m.Name, Parent: m.Parent, Level: m.Level, ChildrenEstimated: m.ChildrenEstimated})
			}
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
		for _, m := range l.tree.Metrics() {
			if m.Level >= 1 {
				nodes[cpu] = append(nodes[cpu], Node{Name: m.Name, Parent: m.Parent, Level: m.Level, ChildrenEstimated: m.ChildrenEstimated, Slots: l.nodes[cpu][m.Name]})
			}
		}
	}
	for _, ev := range l.evals {
		for p, n := range ev.Violations {
			violations[p] += n
		}
	}
	return slots, nodes, violations
}
