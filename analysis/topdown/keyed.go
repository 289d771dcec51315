package topdown

import (
	"math"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
)

// Keyed accumulates one tree's slot counters for many keys (cgroups): Add
// evaluates the tree on one key's counts of one interval and adds each node's
// fraction times that interval's slots to the key, as Live does per CPU. The
// counts arrive already scaled for multiplexing, from the per-cgroup
// attribution; one evaluator serves every key.
type Keyed struct {
	tree    *metric.Tree
	eval    *metric.Evaluator
	inputs  []int           // tree input slot of each counted event, -1 if unused
	metrics []metric.Metric // level >= 1, in tree order
	acc     map[uint64]*keyedSlots
}

type keyedSlots struct {
	slots float64
	nodes []float64 // per metrics entry
	// evaluated: the node had all its inputs in some interval. One that
	// never had (a recording without its events for this key) is left
	// out of Totals rather than reported as no slots.
	evaluated []bool
}

// NewKeyed follows tree t over counts of events (in that order); params holds
// smt_on, #slots and the like.
func NewKeyed(t *metric.Tree, events []string, params map[string]float64) *Keyed {
	k := &Keyed{tree: t, eval: t.NewEvaluator(), acc: map[uint64]*keyedSlots{}}
	for name, v := range params {
		if i := t.Input(name); i >= 0 {
			k.eval.Set(i, v)
		}
	}
	for _, e := range events {
		k.inputs = append(k.inputs, t.Input(e))
	}
	for _, m := range t.Metrics() {
		if m.Level >= 1 {
			k.metrics = append(k.metrics, m)
		}
	}
	return k
}

// Missing lists the tree's event inputs that events lack: intervals without
// them do not evaluate.
func (k *Keyed) Missing(events []string) (missing []string) {
	have := map[string]bool{}
	for _, e := range events {
		have[e] = true
	}
	for _, e := range k.tree.Def.Events {
		if !have[e.Name] {
			missing = append(missing, e.Name)
		}
	}
	return missing
}

// Add folds in one interval of key's counts: counts[i] is events[i]'s, NaN
// where it is missing. An interval whose slots cannot be computed, or are
// zero (the cgroup did not run), adds nothing.
func (k *Keyed) Add(key uint64, counts []float64) {
	k.eval.Reset()
	for i, in := range k.inputs {
		if in >= 0 && i < len(counts) {
			k.eval.Set(in, counts[i])
		}
	}
	k.eval.Eval()
	slots := k.eval.Value("slots")
	if math.IsNaN(slots) || slots <= 0 {
		return
	}
	a := k.acc[key]
	if a == nil {
		a = &keyedSlots{nodes: make([]float64, len(k.metrics)), evaluated: make([]bool, len(k.metrics))}
		k.acc[key] = a
	}
	a.slots += slots
	for i, m := range k.metrics {
		if v := k.eval.Value(m.Name); !math.IsNaN(v) {
			a.nodes[i] += v * slots
			a.evaluated[i] = true
		}
	}
}

// Totals returns key's accumulated slots and node slots, of the nodes
// evaluated in some interval; ok is false when no interval of key has
// evaluated.
func (k *Keyed) Totals(key uint64) (slots float64, nodes []Node, ok bool) {
	a := k.acc[key]
	if a == nil {
		return 0, nil, false
	}
	for i, m := range k.metrics {
		if !a.evaluated[i] {
			continue
		}
		nodes = append(nodes, Node{Name: m.Name, Parent: m.Parent, Level: m.Level, ChildrenEstimated: m.ChildrenEstimated, Slots: a.nodes[i]})
	}
	return a.slots, nodes, true
}

// Forget drops key (a cgroup whose series are gone).
func (k *Keyed) Forget(key uint64) { delete(k.acc, key) }

// Violations counts, per parent, the intervals in which children did not add
// up to it, over every key.
func (k *Keyed) Violations() map[string]uint64 {
	out := map[string]uint64{}
	for p, n := range k.eval.Violations {
		out[p] = n
	}
	return out
}
