// Command tmadeep writes the Top-Down nodes below level 3 of an Intel
// P-core tree (analysis/topdown/defs/deep/<uarch>.yaml) from Intel's
// published metrics and events (intel-perfmon's <platform>/metrics and
// <platform>/events): every TMA metric of level 4 and deeper that the
// hand-written tree lacks, its formula Intel's own with the aliases
// replaced by the events and constants they stand for (as fractions, not
// percents), its parent and threshold from Intel's threshold metrics, the
// events' encodings from the events file, and counter groups that keep
// each node's events together where the general-purpose counters allow
// (a node that needs more is marked approximate). Transcribing by program
// rather than by hand is what keeps several hundred formulas exact; the
// tests hold every node to Intel's formula and every encoding to Intel's
// event list. Run from the repository root, for each part:
//
//	go run ./internal/tmadeep -uarch skx > analysis/topdown/defs/deep/skx.yaml
package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
)

// platform is where a tree's published files are: its metrics and its
// core events.
type platform struct{ metrics, events string }

// platforms are the Intel P-core trees by uarch, with their intel-perfmon
// files.
var platforms = map[string]platform{
	"skl": {"SKL/metrics/skylake_metrics.json", "SKL/events/skylake_core.json"},
	"skx": {"SKX/metrics/skylakex_metrics.json", "SKX/events/skylakex_core.json"},
	"clx": {"CLX/metrics/cascadelakex_metrics.json", "CLX/events/cascadelakex_core.json"},
	"icl": {"ICL/metrics/icelake_metrics.json", "ICL/events/icelake_core.json"},
	"icx": {"ICX/metrics/icelakex_metrics.json", "ICX/events/icelakex_core.json"},
	"spr": {"SPR/metrics/sapphirerapids_metrics.json", "SPR/events/sapphirerapids_core.json"},
	"emr": {"EMR/metrics/emeraldrapids_metrics.json", "EMR/events/emeraldrapids_core.json"},
	"gnr": {"GNR/metrics/graniterapids_metrics.json", "GNR/events/graniterapids_core.json"},
	"adl": {"ADL/metrics/alderlake_metrics_goldencove_core.json", "ADL/events/alderlake_goldencove_core.json"},
}

func main() {
	uarch := flag.String("uarch", "", "the tree: "+strings.Join(names(), ", "))
	ref := flag.String("reference", "../shared/reference", "the reference directory (holding intel-perfmon)")
	flag.Parse()
	if err := run(os.Stdout, *uarch, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "tmadeep:", err)
		os.Exit(1)
	}
}

func names() []string {
	var out []string
	for n := range platforms {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// intelMetric is what tmadeep reads of a metric of Intel's file.
type intelMetric struct {
	MetricName, Formula, Category string
	Level                         int
	Events, Constants             []struct{ Name, Alias string }
	Threshold                     struct {
		Formula          string
		ThresholdMetrics []struct{ Alias, Value string }
	}
}

// intelEvent is what tmadeep reads of an event of Intel's file.
type intelEvent struct {
	EventName, EventCode, UMask, CounterMask, Invert, EdgeDetect, AnyThread, Counter, MSRIndex, MSRValue string
}

func run(w io.Writer, uarch, ref string) error {
	p, ok := platforms[uarch]
	if !ok {
		return fmt.Errorf("-uarch %q: one of %s", uarch, strings.Join(names(), ", "))
	}
	base, err := topdown.BuiltinAuthored(uarch)
	if err != nil {
		return err
	}
	var mf struct{ Metrics []intelMetric }
	var ef struct{ Events []intelEvent }
	if err := readJSON(filepath.Join(ref, "intel-perfmon", p.metrics), &mf); err != nil {
		return err
	}
	if err := readJSON(filepath.Join(ref, "intel-perfmon", p.events), &ef); err != nil {
		return err
	}
	events := map[string]intelEvent{}
	for _, e := range ef.Events {
		events[e.EventName] = e
	}
	have := map[string]bool{}
	for _, m := range base.Metrics {
		have[m.Name] = true
	}
	parents, err := csvParents(filepath.Join(ref, "intel-perfmon", "TMA_Metrics-full.csv"))
	if err != nil {
		return err
	}
	baseSpec := map[string]string{}
	for _, e := range base.Events {
		baseSpec[e.Name] = e.Spec
	}
	g := &gen{uarch: uarch, events: events, baseSpec: baseSpec, gp: topdown.GeneralPurposePerThread(uarch), spec: map[string]string{}, parents: parents, have: have}
	for _, m := range mf.Metrics {
		if m.Category != "TMA" || m.Level < 4 || have[name(m.MetricName)] {
			continue
		}
		if needsSampling(m) {
			g.skipped = append(g.skipped, name(m.MetricName))
			continue
		}
		if err := g.add(m); err != nil {
			return fmt.Errorf("%s: %s: %w", p.metrics, m.MetricName, err)
		}
	}
	g.pack()
	return g.write(w, p)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// needsSampling says whether a metric names an event's retire latency
// (Granite Rapids' :retire_latency), which PEBS samples measure and
// counting does not.
func needsSampling(m intelMetric) bool {
	return slices.ContainsFunc(m.Events, func(e struct{ Name, Alias string }) bool {
		return strings.HasSuffix(e.Name, ":retire_latency")
	})
}

// name is a metric's node name: Intel's, lower case (4K_Aliasing →
// 4k_aliasing), as perf names it without tma_.
func name(intel string) string { return strings.ToLower(intel) }

// gen collects the nodes, events and groups of one tree's deep levels.
type gen struct {
	uarch    string
	events   map[string]intelEvent
	baseSpec map[string]string
	gp       int
	spec     map[string]string // event name → perf spec, the events the nodes add
	order    []string          // spec's names in the order first used
	parents  map[string]string // TMA_Metrics-full.csv's tree: node → parent
	skipped  []string          // nodes that need sampled retire latencies
	have     map[string]bool   // the hand-written tree's nodes, then ours
	nodes    []metric.Metric
	needs    [][]string // each node's events
	params   []string
	groups   [][]string
}

// tokens are a formula's names: aliases, functions and keywords.
var tokens = regexp.MustCompile(`[A-Za-z_][A-Za-z_0-9]*`)

// thresholdName is a threshold metric's value: metric_TMA_<dots><Name>(%),
// two dots a level below the first.
var thresholdName = regexp.MustCompile(`^metric_TMA_(\.*)(\w+)\(%\)$`)

// leftover is an alias a threshold still holds after naming its metrics.
var leftover = regexp.MustCompile(`\b[a-z]\b`)

// comparison is a threshold's comparison of a node with a percentage.
var comparison = regexp.MustCompile(`([a-z]) > ([0-9.]+)`)

func (g *gen) add(m intelMetric) error {
	node := metric.Metric{Name: name(m.MetricName), Level: m.Level, ChildrenEstimated: true}
	named, parent, err := thresholdMetrics(m)
	if err != nil {
		return err
	}
	// A threshold that does not name the parent: the full tree's (whose
	// newer names may differ from the part's: the threshold's are the
	// part's own).
	node.Parent = cmpOr(parent, g.parents[node.Name])
	if slices.Contains(g.skipped, node.Parent) { // under a node not counted
		g.skipped = append(g.skipped, node.Name)
		return nil
	}
	if !g.have[node.Parent] {
		return fmt.Errorf("parent %q is not in the tree", node.Parent)
	}
	g.have[node.Name] = true
	formula, needs, err := g.formula(m)
	if err != nil {
		return err
	}
	node.Formula = percentToFraction(formula)
	if node.Threshold, err = threshold(m, named); err != nil {
		return err
	}
	g.nodes = append(g.nodes, node)
	g.needs = append(g.needs, needs)
	return nil
}

// thresholdMetrics are the metrics Intel's threshold names (the node and
// its ancestors, their level in the dots before their names), as our
// names by alias, and among them the node's parent ("" if none is).
func thresholdMetrics(m intelMetric) (named map[string]string, parent string, err error) {
	named = map[string]string{}
	for _, tm := range m.Threshold.ThresholdMetrics {
		sub := thresholdName.FindStringSubmatch(tm.Value)
		if sub == nil {
			return nil, "", fmt.Errorf("threshold metric %q", tm.Value)
		}
		named[tm.Alias] = name(sub[2])
		if len(sub[1])/2+1 == m.Level-1 {
			parent = name(sub[2])
		}
	}
	return named, parent, nil
}

// formula is Intel's formula with its aliases named: the events (added to
// the tree's), Intel's constants as the tree's params or numbers; and the
// events it needs.
func (g *gen) formula(m intelMetric) (string, []string, error) {
	subst := map[string]string{}
	var needs []string
	for _, e := range m.Events {
		ev, err := g.event(e.Name)
		if err != nil {
			return "", nil, err
		}
		subst[e.Alias] = ev
		needs = append(needs, ev)
	}
	for _, c := range m.Constants {
		switch c.Name {
		case "HYPERTHREADING_ON":
			subst[c.Alias] = "smt_on"
		case "THREADS_PER_CORE":
			subst[c.Alias] = "(2 if smt_on else 1)" // two threads a core on these parts
		case "SYSTEM_TSC_FREQ", "DURATIONTIMEINMILLISECONDS":
			subst[c.Alias] = c.Name
			if !slices.Contains(g.params, c.Name) {
				g.params = append(g.params, c.Name)
			}
		default:
			if _, err := strconv.ParseFloat(c.Name, 64); err != nil {
				return "", nil, fmt.Errorf("constant %s: not a number, and not one tmadeep knows", c.Name)
			}
			subst[c.Alias] = c.Name
		}
	}
	keywords := map[string]bool{"if": true, "else": true, "min": true, "max": true, "and": true, "or": true, "not": true}
	var unknown []string
	formula := tokens.ReplaceAllStringFunc(m.Formula, func(tok string) string {
		if v, ok := subst[tok]; ok {
			return v
		}
		if !keywords[tok] {
			unknown = append(unknown, tok)
		}
		return tok
	})
	if len(unknown) > 0 {
		return "", nil, fmt.Errorf("formula %q names %v, which are neither events nor constants", m.Formula, unknown)
	}
	return formula, needs, nil
}

// threshold is Intel's threshold with its metrics named and its
// percentages as fractions.
func threshold(m intelMetric, named map[string]string) (string, error) {
	t := comparison.ReplaceAllStringFunc(m.Threshold.Formula, func(s string) string {
		sub := comparison.FindStringSubmatch(s)
		pct, _ := strconv.ParseFloat(sub[2], 64)
		n, ok := named[sub[1]]
		if !ok {
			return s
		}
		return fmt.Sprintf("(%s > %s)", n, strconv.FormatFloat(pct/100, 'f', -1, 64))
	})
	if leftover.MatchString(t) {
		return "", fmt.Errorf("threshold %q: an alias left unnamed in %q", m.Threshold.Formula, t)
	}
	return strings.Join(strings.Fields(t), " "), nil
}

// csvParents reads TMA_Metrics-full.csv's hierarchy: each node's name
// sits in its level's column (Level1 to Level6), under the last node of
// the level above it.
func csvParents(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	var last [7]string // the last node seen at each level
	header := false
	for _, row := range rows {
		if len(row) > 6 && row[0] == "Key" && row[1] == "Level1" {
			header = true
			continue
		}
		if !header || len(row) < 7 {
			continue
		}
		for lvl := 1; lvl <= 6; lvl++ {
			if n := strings.TrimSpace(row[lvl]); n != "" {
				last[lvl] = name(n)
				if lvl > 1 {
					out[name(n)] = last[lvl-1]
				}
				break
			}
		}
	}
	if !header {
		return nil, fmt.Errorf("%s: no Key,Level1,… header", path)
	}
	return out, nil
}

// percentToFraction turns Intel's "100 * ( x )" into "x", or divides.
func percentToFraction(f string) string {
	f = strings.Join(strings.Fields(f), " ")
	if inner, ok := strings.CutPrefix(f, "100 * ( "); ok && strings.HasSuffix(inner, " )") && balanced(strings.TrimSuffix(inner, " )")) {
		return strings.TrimSuffix(inner, " )")
	}
	return "( " + f + " ) / 100"
}

// balanced says whether every parenthesis of s closes within it.
func balanced(s string) bool {
	depth := 0
	for _, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			if depth--; depth < 0 {
				return false
			}
		}
	}
	return depth == 0
}

// event is the tree's name for an event Intel's formula names, adding its
// spec unless the hand-written tree already counts it: Intel's name with
// its modifiers (:c1 cmask, :e1 edge, :i1 invert, :u0x80 umask,
// :ocr_msr_val=… the offcore response), less the equals sign formulas
// cannot hold.
func (g *gen) event(intel string) (string, error) {
	ours := strings.ReplaceAll(intel, "=", "")
	if _, ok := g.baseSpec[ours]; ok {
		return ours, nil
	}
	if _, ok := g.spec[ours]; ok {
		return ours, nil
	}
	parts := strings.Split(intel, ":")
	e, ok := g.events[parts[0]]
	if !ok {
		return "", fmt.Errorf("event %s is not in the events file", parts[0])
	}
	code, _, _ := strings.Cut(e.EventCode, ",") // offcore: 0xB7, 0xBB: the kernel picks the free one
	terms := []string{"event=" + strings.ToLower(strings.TrimSpace(code)), "umask=" + strings.ToLower(e.UMask)}
	cmask, edge, inv, offcore := e.CounterMask, e.EdgeDetect, e.Invert, ""
	switch strings.ToLower(e.MSRIndex) {
	case "0x1a6,0x1a7", "0x1a6, 0x1a7":
		offcore = e.MSRValue
	case "0x3f6":
		terms = append(terms, "ldlat="+e.MSRValue)
	case "0x3f7":
		terms = append(terms, "frontend="+e.MSRValue)
	case "", "0", "0x00":
	default:
		return "", fmt.Errorf("event %s: MSR %s is not one tmadeep encodes", e.EventName, e.MSRIndex)
	}
	for _, mod := range parts[1:] {
		switch {
		case strings.HasPrefix(mod, "ocr_msr_val="):
			offcore = strings.TrimPrefix(mod, "ocr_msr_val=")
		case strings.HasPrefix(mod, "c"):
			cmask = mod[1:]
		case strings.HasPrefix(mod, "e"):
			edge = mod[1:]
		case strings.HasPrefix(mod, "i"):
			inv = mod[1:]
		case strings.HasPrefix(mod, "u"):
			terms[1] = "umask=" + mod[1:]
		default:
			return "", fmt.Errorf("event %s: modifier %q", intel, mod)
		}
	}
	for _, t := range []struct{ term, v string }{{"cmask", cmask}, {"edge", edge}, {"inv", inv}, {"any", e.AnyThread}} {
		if t.v != "" && t.v != "0" && t.v != "0x0" && t.v != "0x00" {
			terms = append(terms, t.term+"="+t.v)
		}
	}
	if offcore != "" {
		terms = append(terms, "offcore_rsp="+strings.ToLower(offcore))
	}
	g.spec[ours] = "cpu/" + strings.Join(terms, ",") + ",name=" + ours + "/"
	g.order = append(g.order, ours)
	return ours, nil
}

// fixed is the fixed counter an event can take, "" for none: Intel's
// Counter field ("Fixed counter 1").
func (g *gen) fixed(event string) string {
	e, ok := g.events[strings.SplitN(event, ":", 2)[0]]
	if strings.Contains(event, ":") || !ok || !strings.HasPrefix(e.Counter, "Fixed counter") {
		if strings.HasPrefix(event, "PERF_METRICS.") {
			return "none"
		}
		return ""
	}
	return e.Counter
}

// counters are the general-purpose counters event may use.
func (g *gen) counters(event string) []int {
	e := g.events[strings.SplitN(event, ":", 2)[0]]
	var out []int
	for _, c := range strings.Split(e.Counter, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(c)); err == nil && n < g.gp {
			out = append(out, n)
		}
	}
	if len(out) == 0 { // a fixed counter's event displaced onto a general one
		for n := range g.gp {
			out = append(out, n)
		}
	}
	return out
}

// fits says whether the events can all be counted at once: each fixed
// counter serves one event, the rest each take a general-purpose counter
// its Counter field allows (a matching), at most two are offcore
// responses, and those that set the frontend or load latency MSR agree on
// its value.
func (g *gen) fits(events []string) bool {
	usedFixed := map[string]bool{}
	var general [][]int
	offcore := 0
	shared := map[string]map[string]bool{} // frontend, ldlat: one MSR each, one value
	for _, e := range events {
		spec := cmpOr(g.spec[e], g.baseSpec[e])
		if strings.Contains(spec, "offcore_rsp=") {
			offcore++
		}
		for _, term := range strings.Split(strings.Trim(strings.TrimPrefix(spec, "cpu/"), "/"), ",") {
			if k, v, ok := strings.Cut(term, "="); ok && (k == "frontend" || k == "ldlat") {
				if shared[k] == nil {
					shared[k] = map[string]bool{}
				}
				shared[k][v] = true
			}
		}
		switch f := g.fixed(e); {
		case f == "none":
		case f != "" && !usedFixed[f]:
			usedFixed[f] = true
		default:
			general = append(general, g.counters(e))
		}
	}
	// Two MSRs hold the offcore responses' request and response types
	// (0x1a6, 0x1a7): two such events at once.
	if len(general) > g.gp || offcore > 2 || len(shared["frontend"]) > 1 || len(shared["ldlat"]) > 1 {
		return false
	}
	owner := make([]int, g.gp)
	for i := range owner {
		owner[i] = -1
	}
	var try func(i int, seen []bool) bool
	try = func(i int, seen []bool) bool {
		for _, c := range general[i] {
			if seen[c] {
				continue
			}
			seen[c] = true
			if owner[c] < 0 || try(owner[c], seen) {
				owner[c] = i
				return true
			}
		}
		return false
	}
	for i := range general {
		if !try(i, make([]bool, g.gp)) {
			return false
		}
	}
	return true
}

// pack lays the nodes' events out in groups: each node's with the cycles,
// merged into an earlier group where the union still fits; a node whose
// events do not fit one group is approximate, its events spread over
// groups.
func (g *gen) pack() {
	const cycles = "CPU_CLK_UNHALTED.THREAD"
	place := func(events []string) {
		for i, grp := range g.groups {
			union := append(slices.Clone(grp), events...)
			union = slices.Compact(sortedUnique(union))
			if g.fits(union) {
				g.groups[i] = union
				return
			}
		}
		g.groups = append(g.groups, sortedUnique(append([]string{cycles}, events...)))
	}
	for i, needs := range g.needs {
		events := sortedUnique(append([]string{cycles}, needs...))
		if g.fits(events) {
			place(events)
			continue
		}
		g.nodes[i].Approximate = true
		for _, e := range needs {
			if e != cycles && !slices.ContainsFunc(g.groups, func(grp []string) bool { return slices.Contains(grp, e) }) {
				place([]string{cycles, e})
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	// The cycles first, as the hand-written groups have them.
	s = slices.Compact(s)
	if i := slices.Index(s, "CPU_CLK_UNHALTED.THREAD"); i > 0 {
		cycles := s[i]
		s = append([]string{cycles}, slices.Delete(s, i, i+1)...)
	}
	return s
}

func (g *gen) write(w io.Writer, p platform) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Generated by `go run ./internal/tmadeep -uarch %s` from intel-perfmon's\n# %s and %s: do not edit.\n", g.uarch, p.metrics, p.events)
	b.WriteString("# Top-Down below level 3: Intel's TMA metrics of levels 4 to 6 that the\n" +
		"# hand-written tree lacks, as fractions, with the events they add and\n" +
		"# groups keeping each node's events together where the counters allow.\n")
	fmt.Fprintf(&b, "name: %s\n", g.uarch)
	if len(g.skipped) > 0 {
		b.WriteString("# Not counted: these nodes' formulas use events' retire latency, which\n# PEBS samples measure and counting does not (and the nodes under them).\n")
		fmt.Fprintf(&b, "uncounted: [%s]\n", strings.Join(g.skipped, ", "))
	}
	if len(g.params) > 0 {
		fmt.Fprintf(&b, "params: [%s]\n", strings.Join(g.params, ", "))
	}
	if len(g.order) > 0 {
		b.WriteString("events:\n")
		for _, n := range g.order {
			fmt.Fprintf(&b, "  - {name: %s, spec: %q}\n", n, g.spec[n])
		}
	}
	if len(g.groups) > 0 {
		b.WriteString("groups:\n")
		for _, grp := range g.groups {
			fmt.Fprintf(&b, "  - [%s]\n", strings.Join(grp, ", "))
		}
	}
	if len(g.nodes) == 0 {
		return errors.New("no node below level 3 to add")
	}
	b.WriteString("metrics:\n")
	for _, n := range g.nodes {
		fmt.Fprintf(&b, "  - name: %s\n    level: %d\n    parent: %s\n    children_estimated: true\n", n.Name, n.Level, n.Parent)
		if n.Approximate {
			b.WriteString("    approximate: true\n")
		}
		fmt.Fprintf(&b, "    formula: >-\n      %s\n", n.Formula)
		if n.Threshold != "" {
			fmt.Fprintf(&b, "    threshold: %s\n", n.Threshold)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
