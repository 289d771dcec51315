package metric

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric/expr"
)

// Prune is d cut to the nodes a user asked for: levels 1 to maxLevel (0:
// every level) and, where nodes names some, below level 1 only their
// subtrees and their ancestors, as toplev's --nodes selects. A deeper
// metric that a kept one uses (in its formula or threshold) stays as a
// hidden helper: level 0, no parent, no threshold. The events and params
// are those the kept metrics use, in d's order; the groups keep those
// events, less a group all of whose events an earlier kept group already
// counts: deeper levels cost no counters unless asked for. An unknown
// node, or one deeper than maxLevel, is an error.
func (d *Definition) Prune(maxLevel int, nodes []string) (*Definition, error) {
	byName := map[string]int{}
	for i, m := range d.Metrics {
		byName[m.Name] = i
	}
	named := map[string]bool{}
	for _, n := range nodes {
		i, ok := byName[n]
		switch {
		case !ok || d.Metrics[i].Level == 0:
			return nil, fmt.Errorf("%s: no node %q (have: %s)", d.Name, n, strings.Join(d.nodeNames(), ", "))
		case maxLevel > 0 && d.Metrics[i].Level > maxLevel:
			return nil, fmt.Errorf("%s: node %s is at level %d, below the level asked for (%d)", d.Name, n, d.Metrics[i].Level, maxLevel)
		}
		named[n] = true
	}
	shown := d.selection(maxLevel, named, byName)
	keep := map[string]bool{}
	events := map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		i, isMetric := byName[name]
		if !isMetric {
			events[name] = true // an event, param or constant: kept events are filtered below
			return
		}
		if keep[name] {
			return
		}
		keep[name] = true
		for _, r := range names(d.Metrics[i]) {
			visit(r)
		}
	}
	for _, m := range d.Metrics {
		if shown(m) {
			visit(m.Name)
		}
	}
	if _, ok := byName["slots"]; ok {
		visit("slots") // the denominator every fraction is exported against
	}
	// Hidden helpers over what is counted anyway (slots, core_clks) stay.
	for _, m := range d.Metrics {
		if m.Level != 0 || keep[m.Name] {
			continue
		}
		counted := true
		for _, r := range names(m) {
			if _, isMetric := byName[r]; isMetric && !keep[r] || !isMetric && !events[r] && d.isEvent(r) {
				counted = false
			}
		}
		if counted {
			keep[m.Name] = true
		}
	}
	out := *d
	out.Metrics = nil
	for _, m := range d.Metrics {
		if !keep[m.Name] {
			continue
		}
		if m.Level > 0 && !shown(m) {
			m.Level, m.Parent, m.Threshold = 0, "", ""
		}
		out.Metrics = append(out.Metrics, m)
	}
	out.Events = slices.DeleteFunc(slices.Clone(d.Events), func(e Event) bool { return !events[e.Name] })
	out.Params = slices.DeleteFunc(slices.Clone(d.Params), func(p string) bool { return !events[p] })
	out.Groups = groupsOf(d.Groups, events, d.together(out.Metrics, byName))
	return &out, nil
}

// together are the events each exact (not approximate) metric of kept
// rests on through its formula, which must be counted in one group.
func (d *Definition) together(kept []Metric, byName map[string]int) [][]string {
	var out [][]string
	for _, m := range kept {
		if m.Approximate {
			continue
		}
		seen := map[string]bool{}
		var evs []string
		var walk func(formula string)
		walk = func(formula string) {
			prog, err := expr.Compile(formula, func(string) (int, bool) { return 0, true })
			if err != nil {
				return // Compile reports it
			}
			for _, n := range prog.Names {
				if seen[n] {
					continue
				}
				seen[n] = true
				if i, isMetric := byName[n]; isMetric {
					walk(d.Metrics[i].Formula)
				} else if d.isEvent(n) {
					evs = append(evs, n)
				}
			}
		}
		walk(m.Formula)
		out = append(out, evs)
	}
	return out
}

// selection says which nodes a user sees: levels 1 to maxLevel (0: all)
// and, where nodes are named, below level 1 only their subtrees and
// their ancestors.
func (d *Definition) selection(maxLevel int, named map[string]bool, byName map[string]int) func(Metric) bool {
	// below says whether m is a named node or lies below one.
	var below func(m Metric) bool
	below = func(m Metric) bool {
		if named[m.Name] {
			return true
		}
		i, ok := byName[m.Parent]
		return ok && below(d.Metrics[i])
	}
	above := map[string]bool{}
	for n := range named {
		for p := d.Metrics[byName[n]].Parent; p != ""; p = d.Metrics[byName[p]].Parent {
			above[p] = true
		}
	}
	return func(m Metric) bool {
		if m.Level == 0 || (maxLevel > 0 && m.Level > maxLevel) {
			return false
		}
		return len(named) == 0 || m.Level == 1 || below(m) || above[m.Name]
	}
}

// names are the names a metric's formula and threshold use.
func names(m Metric) []string {
	var out []string
	for _, f := range []string{m.Formula, m.Threshold} {
		if f == "" {
			continue
		}
		prog, err := expr.Compile(f, func(string) (int, bool) { return 0, true })
		if err != nil {
			continue // Compile reports it
		}
		for _, n := range prog.Names {
			out = append(out, strings.TrimSuffix(n, "(%)"))
		}
	}
	return out
}

// groupsOf keeps the kept events of each group, less a group all of whose
// events an earlier kept group already counts, unless it is the first to
// hold all of an exact metric's events together (a deeper node's group
// whose events the levels above count, but apart).
func groupsOf(groups [][]string, kept map[string]bool, together [][]string) [][]string {
	var out [][]string
	counted := map[string]bool{}
	holds := func(g, evs []string) bool {
		return !slices.ContainsFunc(evs, func(e string) bool { return !slices.Contains(g, e) })
	}
	for _, g := range groups {
		in := slices.DeleteFunc(slices.Clone(g), func(e string) bool { return !kept[e] })
		if !slices.ContainsFunc(in, func(e string) bool { return !counted[e] }) && !slices.ContainsFunc(together, func(evs []string) bool {
			return len(evs) > 0 && holds(in, evs) && !slices.ContainsFunc(out, func(earlier []string) bool { return holds(earlier, evs) })
		}) {
			continue // nothing an earlier group does not count already, nor together
		}
		for _, e := range in {
			counted[e] = true
		}
		out = append(out, in)
	}
	return out
}

func (d *Definition) isEvent(name string) bool {
	return slices.ContainsFunc(d.Events, func(e Event) bool { return e.Name == name })
}

// nodeNames are the names of the metrics of levels 1 and deeper.
func (d *Definition) nodeNames() []string {
	var out []string
	for _, m := range d.Metrics {
		if m.Level > 0 {
			out = append(out, m.Name)
		}
	}
	return out
}

// Levels is the deepest level of d's nodes.
func (d *Definition) Levels() int {
	deepest := 0
	for _, m := range d.Metrics {
		deepest = max(deepest, m.Level)
	}
	return deepest
}
