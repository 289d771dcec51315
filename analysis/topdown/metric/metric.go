// Package metric holds metric hierarchies in the KOJAK manner: a tree of named
// metrics, each a formula over events, constants and other metrics, with a level,
// a parent, a threshold and a description, in YAML that users can read, extend
// and override. A Definition is validated when compiled — unknown names, cycles,
// missing parents, and formulas whose events were not measured together (allowed
// only when marked approximate) — and becomes a Tree whose Evaluator computes
// every metric for one interval without allocating.
package metric

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric/expr"
)

// Definition is one metric file.
type Definition struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Constants are fixed numbers (pipeline width, latencies).
	Constants map[string]float64 `yaml:"constants"`
	// Params are numbers the caller supplies per host: smt_on, #slots, threads.
	Params []string `yaml:"params"`
	// Events are the counted inputs: the name formulas use and the perf spec
	// that counts it.
	Events []Event `yaml:"events"`
	// Groups list events that must be counted together (one perf group).
	Groups  [][]string `yaml:"groups"`
	Metrics []Metric   `yaml:"metrics"`
	// Info are core events the Info metrics (toplev's MPKI at each cache
	// level) need beyond the tree, counted as one group where asked
	// (--collector.counting.info-events) and exported as counted events.
	Info []Event `yaml:"info"`
	// Drop names metrics an override removes from the tree it overrides
	// (a part that lacks a node its family has).
	Drop []string `yaml:"drop"`
	// Uncounted names nodes of the published tree this definition does
	// not count, its comment says why (Granite Rapids' nodes that rest on
	// sampled retire latencies).
	Uncounted []string `yaml:"uncounted"`
}

// Event is a counted input.
type Event struct {
	Name string `yaml:"name"`
	Spec string `yaml:"spec"`
}

// Metric is one node of the tree.
type Metric struct {
	Name        string `yaml:"name"`
	Level       int    `yaml:"level"`
	Parent      string `yaml:"parent"`
	Formula     string `yaml:"formula"`
	Threshold   string `yaml:"threshold"`
	Description string `yaml:"description"`
	// Approximate allows events from different groups in one formula.
	Approximate bool `yaml:"approximate"`
	// ChildrenEstimated says its children are separate estimates, not a
	// partition of it (TMA's levels 3 and deeper, mostly shares of cycles
	// rather than of slots): their sum is not held to it.
	ChildrenEstimated bool   `yaml:"children_estimated"`
	file              string // where it was defined, for errors
	line              int
}

// where names the metric in errors: file:line where it was read from a file,
// else the definition's name (a definition built in Go has no line).
func (m Metric) where(d *Definition) string {
	file := m.file
	if file == "" {
		file = d.Name
	}
	if m.line > 0 {
		return fmt.Sprintf("%s:%d: metric %s", file, m.line, m.Name)
	}
	return fmt.Sprintf("%s: metric %s", file, m.Name)
}

// Parse reads a definition file; file names it in errors.
func Parse(file string, data []byte) (*Definition, error) {
	var d Definition
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i := range d.Metrics {
		d.Metrics[i].file = file
	}
	// Keep the line of each metric's formula for error messages.
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) == 1 {
		root := doc.Content[0]
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value != "metrics" {
				continue
			}
			for j, m := range root.Content[i+1].Content {
				if j >= len(d.Metrics) {
					break
				}
				d.Metrics[j].line = m.Line
				for k := 0; k+1 < len(m.Content); k += 2 {
					if m.Content[k].Value == "formula" {
						d.Metrics[j].line = m.Content[k+1].Line
					}
				}
			}
		}
	}
	return &d, nil
}

// Override returns d with the metrics, events, groups and constants of o added,
// replacing those of the same name, and the metrics o drops removed: how
// users extend or correct a built-in tree, and how a part's tree differs
// from its family's.
func (d *Definition) Override(o *Definition) *Definition {
	out := *d
	out.Constants = map[string]float64{}
	for k, v := range d.Constants {
		out.Constants[k] = v
	}
	for k, v := range o.Constants {
		out.Constants[k] = v
	}
	out.Events = mergeByName(d.Events, o.Events, func(e Event) string { return e.Name })
	out.Metrics = mergeByName(slices.DeleteFunc(slices.Clone(d.Metrics), func(m Metric) bool { return slices.Contains(o.Drop, m.Name) }),
		o.Metrics, func(m Metric) string { return m.Name })
	out.Groups = append(append([][]string(nil), d.Groups...), o.Groups...)
	out.Params = append(append([]string(nil), d.Params...), o.Params...)
	out.Uncounted = append(append([]string(nil), d.Uncounted...), o.Uncounted...)
	return &out
}

func mergeByName[T any](base, over []T, name func(T) string) []T {
	out := append([]T(nil), base...)
	for _, o := range over {
		replaced := false
		for i := range out {
			if name(out[i]) == name(o) {
				out[i], replaced = o, true
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}

// Tree is a compiled, validated definition.
type Tree struct {
	Def *Definition
	// Inputs are the slots a caller fills each interval: events, then params.
	Inputs   []string
	inputIdx map[string]int
	nodes    []node // in evaluation order (dependencies first)
	byName   map[string]int
	consts   int // first constant slot
	slots    int
	stack    int
	children map[int][]int // node index -> child node indexes
	eventsOf map[string][]string
}

// EventsOf are the counted events a metric rests on, through the metrics
// it uses: all in one group unless it is approximate.
func (t *Tree) EventsOf(metric string) []string { return t.eventsOf[metric] }

type node struct {
	Metric
	slot      int
	prog      *expr.Program
	threshold *expr.Program
}

// Compile validates d and prepares it for evaluation: every name gets a
// slot, every formula compiles and every parent fits, the metrics are put
// in the order they depend on each other, the events each rests on were
// counted together, and the nodes are laid out for the evaluator.
func (d *Definition) Compile() (*Tree, error) {
	t := &Tree{Def: d, inputIdx: map[string]int{}, byName: map[string]int{}, children: map[int][]int{}}
	slot, metricIdx, err := t.assignSlots()
	if err != nil {
		return nil, err
	}
	nodes, deps, err := d.compileNodes(slot, metricIdx)
	if err != nil {
		return nil, err
	}
	order, err := topoSort(d.Metrics, deps, metricIdx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name, err)
	}
	eventsOf, err := d.groupedEvents(nodes, deps, order, slot, metricIdx)
	if err != nil {
		return nil, err
	}
	t.eventsOf = map[string][]string{}
	for i, m := range d.Metrics {
		t.eventsOf[m.Name] = eventsOf[i]
	}
	t.place(nodes, order)
	return t, nil
}

// assignSlots gives every event, parameter, constant and metric of t's
// definition a slot of the evaluator (inputs first, then constants, then
// metrics), and each metric its index; a name defined twice is an error.
func (t *Tree) assignSlots() (slot, metricIdx map[string]int, err error) {
	d := t.Def
	var errs []error
	slot = map[string]int{}
	add := func(name, what string) {
		if _, dup := slot[name]; dup {
			errs = append(errs, fmt.Errorf("%s: %s %q is defined twice", d.Name, what, name))
			return
		}
		slot[name] = len(slot)
	}
	for _, e := range d.Events {
		add(e.Name, "event")
		t.Inputs = append(t.Inputs, e.Name)
	}
	for _, p := range d.Params {
		add(p, "parameter")
		t.Inputs = append(t.Inputs, p)
	}
	for i, n := range t.Inputs {
		t.inputIdx[n] = i
	}
	t.consts = len(slot)
	constNames := make([]string, 0, len(d.Constants))
	for n := range d.Constants {
		constNames = append(constNames, n)
	}
	sort.Strings(constNames)
	for _, n := range constNames {
		add(n, "constant")
	}
	metricIdx = map[string]int{}
	for i, m := range d.Metrics {
		if _, dup := metricIdx[m.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: metric %q is defined twice", d.Name, m.Name))
			continue
		}
		metricIdx[m.Name] = i
		add(m.Name, "metric")
	}
	t.slots = len(slot)
	return slot, metricIdx, errors.Join(errs...)
}

// compileNodes compiles every metric's formula and threshold against the
// slots, notes the metrics each one uses, and checks its parent and level.
func (d *Definition) compileNodes(slot, metricIdx map[string]int) ([]node, [][]string, error) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	resolve := func(name string) (int, bool) {
		s, ok := slot[strings.TrimSuffix(name, "(%)")]
		return s, ok
	}
	deps := make([][]string, len(d.Metrics))
	nodes := make([]node, len(d.Metrics))
	for i, m := range d.Metrics {
		where := m.where(d)
		prog, err := expr.Compile(m.Formula, resolve)
		if err != nil {
			fail("%s: formula: %v", where, err)
			continue
		}
		nodes[i] = node{Metric: m, slot: slot[m.Name], prog: prog}
		if m.Threshold != "" {
			if nodes[i].threshold, err = expr.Compile(m.Threshold, resolve); err != nil {
				fail("%s: threshold: %v", where, err)
			}
		}
		for _, n := range prog.Names {
			if _, isMetric := metricIdx[n]; isMetric {
				deps[i] = append(deps[i], n)
			}
		}
		if m.Parent != "" {
			if _, ok := metricIdx[m.Parent]; !ok {
				fail("%s: parent %q is not a metric", where, m.Parent)
			} else if pl := d.Metrics[metricIdx[m.Parent]].Level; m.Level != pl+1 {
				fail("%s: level %d under parent %s of level %d", where, m.Level, m.Parent, pl)
			}
		} else if m.Level > 1 {
			fail("%s: level %d needs a parent", where, m.Level)
		}
	}
	return nodes, deps, errors.Join(errs...)
}

// groupedEvents are the events each metric rests on, through the metrics it
// uses (in order, dependencies first), which must have been counted in one
// group unless the metric is marked approximate.
func (d *Definition) groupedEvents(nodes []node, deps [][]string, order []int, slot, metricIdx map[string]int) ([][]string, error) {
	var errs []error
	eventsOf := make([][]string, len(d.Metrics))
	for _, i := range order {
		seen := map[string]bool{}
		add := func(n string) {
			if !seen[n] {
				seen[n] = true
				eventsOf[i] = append(eventsOf[i], n)
			}
		}
		for _, n := range nodes[i].prog.Names {
			if s, ok := slot[n]; ok && s < len(d.Events) {
				add(n)
			}
		}
		for _, dep := range deps[i] {
			for _, n := range eventsOf[metricIdx[dep]] {
				add(n)
			}
		}
		if m := d.Metrics[i]; !m.Approximate {
			if err := sameGroup(d, eventsOf[i]); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v (mark it approximate: true if that is intended)", m.where(d), err))
			}
		}
	}
	return eventsOf, errors.Join(errs...)
}

// place lays the nodes out in evaluation order, sizes the evaluator's
// stack, and links each node to its children.
func (t *Tree) place(nodes []node, order []int) {
	for _, i := range order {
		t.byName[t.Def.Metrics[i].Name] = len(t.nodes)
		t.nodes = append(t.nodes, nodes[i])
		t.stack = max(t.stack, nodes[i].prog.StackSize())
		if nodes[i].threshold != nil {
			t.stack = max(t.stack, nodes[i].threshold.StackSize())
		}
	}
	for i, n := range t.nodes {
		if n.Parent != "" {
			p := t.byName[n.Parent]
			t.children[p] = append(t.children[p], i)
		}
	}
}

// sameGroup checks that events were all counted in one group, so their ratios
// come from one counter schedule.
func sameGroup(d *Definition, events []string) error {
	if len(events) <= 1 || len(d.Groups) == 0 {
		return nil
	}
	for _, g := range d.Groups {
		all := true
		for _, e := range events {
			found := false
			for _, ge := range g {
				found = found || ge == e
			}
			all = all && found
		}
		if all {
			return nil
		}
	}
	return fmt.Errorf("events %s are not all in one group", strings.Join(events, ", "))
}

func topoSort(ms []Metric, deps [][]string, idx map[string]int) ([]int, error) {
	const (
		unseen = iota
		active
		done
	)
	state := make([]int, len(ms))
	var order []int
	var visit func(i int, path []string) error
	visit = func(i int, path []string) error {
		switch state[i] {
		case active:
			return fmt.Errorf("metrics form a cycle: %s -> %s", strings.Join(path, " -> "), ms[i].Name)
		case done:
			return nil
		}
		state[i] = active
		for _, d := range deps[i] {
			if err := visit(idx[d], append(path, ms[i].Name)); err != nil {
				return err
			}
		}
		state[i] = done
		order = append(order, i)
		return nil
	}
	for i := range ms {
		if err := visit(i, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// Metrics lists the metric names in evaluation order.
func (t *Tree) Metrics() []Metric {
	out := make([]Metric, len(t.nodes))
	for i, n := range t.nodes {
		out[i] = n.Metric
	}
	return out
}

// Input returns the slot of an event or param, or -1.
func (t *Tree) Input(name string) int {
	if i, ok := t.inputIdx[name]; ok {
		return i
	}
	return -1
}

// Evaluator computes a tree's metrics for one interval at a time. It is not safe
// for concurrent use; make one per goroutine.
type Evaluator struct {
	t      *Tree
	values []float64
	stack  []float64
	// Violations counts, per parent metric, intervals in which its children did
	// not sum to it within the tolerance.
	Violations map[string]uint64
	Tolerance  float64
}

// NewEvaluator makes an evaluator with every input missing.
func (t *Tree) NewEvaluator() *Evaluator {
	e := &Evaluator{t: t, values: make([]float64, t.slots), stack: make([]float64, max(t.stack, 1)),
		Violations: map[string]uint64{}, Tolerance: 1e-6}
	for i := range t.Def.Events {
		e.values[i] = math.NaN()
	}
	for i := len(t.Def.Events); i < t.consts; i++ {
		e.values[i] = math.NaN()
	}
	for i, n := range sortedConstNames(t.Def.Constants) {
		e.values[t.consts+i] = t.Def.Constants[n]
	}
	return e
}

func sortedConstNames(m map[string]float64) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Set sets input slot i (from Tree.Input) for the next Eval; NaN means missing.
func (e *Evaluator) Set(i int, v float64) { e.values[i] = v }

// CopyInputs sets every input (events and params) to o's, an evaluator of
// the same tree.
func (e *Evaluator) CopyInputs(o *Evaluator) {
	copy(e.values[:len(e.t.Inputs)], o.values[:len(e.t.Inputs)])
}

// Reset marks every event input missing, keeping params.
func (e *Evaluator) Reset() {
	for i := range e.t.Def.Events {
		e.values[i] = math.NaN()
	}
}

// Closure is the evaluation plan of the named metrics and the metrics
// they use, in evaluation order: what EvalSome computes.
func (t *Tree) Closure(names []string) []int {
	need := map[string]bool{}
	var visit func(string)
	visit = func(name string) {
		i, ok := t.byName[name]
		if !ok || need[name] {
			return
		}
		need[name] = true
		for _, n := range t.nodes[i].prog.Names {
			visit(strings.TrimSuffix(n, "(%)"))
		}
	}
	for _, n := range names {
		visit(n)
	}
	var plan []int
	for i, n := range t.nodes { // nodes are in evaluation order
		if need[n.Name] {
			plan = append(plan, i)
		}
	}
	return plan
}

// EvalSome computes the metrics of a plan (Closure) from the inputs set,
// without the containment check: a few nodes, not the tree.
func (e *Evaluator) EvalSome(plan []int) {
	for _, i := range plan {
		n := &e.t.nodes[i]
		e.values[n.slot] = n.prog.Eval(e.values, e.stack)
	}
}

// Eval computes every metric from the inputs set, and checks containment.
func (e *Evaluator) Eval() {
	for _, n := range e.t.nodes {
		e.values[n.slot] = n.prog.Eval(e.values, e.stack)
	}
	for p, kids := range e.t.children {
		parent := e.values[e.t.nodes[p].slot]
		if math.IsNaN(parent) || e.t.nodes[p].ChildrenEstimated {
			continue
		}
		sum := 0.0
		for _, k := range kids {
			sum += e.values[e.t.nodes[k].slot]
		}
		if math.IsNaN(sum) {
			continue
		}
		if math.Abs(sum-parent) > e.Tolerance*math.Max(1, math.Abs(parent)) {
			e.Violations[e.t.nodes[p].Name]++
		}
	}
}

// Value returns a metric's value from the last Eval; NaN when an input was missing.
func (e *Evaluator) Value(name string) float64 {
	i, ok := e.t.byName[name]
	if !ok {
		return math.NaN()
	}
	return e.values[e.t.nodes[i].slot]
}

// ValueAt is Value of the i-th metric of Metrics (evaluation order), for
// callers that read every metric each interval and keep no names.
func (e *Evaluator) ValueAt(i int) float64 { return e.values[e.t.nodes[i].slot] }

// Above reports whether a metric's threshold holds (false when it has none).
func (e *Evaluator) Above(name string) bool {
	i, ok := e.t.byName[name]
	if !ok || e.t.nodes[i].threshold == nil {
		return false
	}
	v := e.t.nodes[i].threshold.Eval(e.values, e.stack)
	return !math.IsNaN(v) && v != 0
}

// UserError is a problem of a user's definitions file: one that does not
// read, parse or compile, or with which a built-in tree it extends no longer
// compiles. Callers treat it as a configuration error.
type UserError struct {
	File string
	Err  error
}

func (e *UserError) Error() string {
	if strings.HasPrefix(e.Err.Error(), e.File+":") {
		return e.Err.Error() // already says where
	}
	return e.File + ": " + e.Err.Error()
}

func (e *UserError) Unwrap() error { return e.Err }

// Extend parses the user's definitions file (its name and contents) and
// merges it over base (nil: the file is the whole tree), then compiles the
// result. Every error is a
// *UserError naming the user's file: where a built-in metric no longer
// compiles because of the user's events, groups or metrics, it says so
// rather than pointing at the built-in file alone.
func Extend(base *Definition, userFile string, data []byte) (*Definition, *Tree, error) {
	user, err := Parse(userFile, data)
	if err != nil {
		return nil, nil, &UserError{userFile, err}
	}
	def := user
	if base != nil {
		def = base.Override(user)
	}
	tree, err := def.Compile()
	if err == nil {
		return def, tree, nil
	}
	if base != nil {
		if _, baseErr := base.Compile(); baseErr == nil && !strings.Contains(err.Error(), userFile+":") {
			err = fmt.Errorf("with these definitions the built-in %s tree no longer compiles: %w", base.Name, err)
		}
	}
	return nil, nil, &UserError{userFile, err}
}
