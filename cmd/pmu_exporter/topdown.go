package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/collector"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/perfstat"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
)

// topdownFlags are the options of `pmu_exporter topdown`.
type topdownFlags struct {
	uarch, smt, format, definitions, input string
	slots                                  float64
	tscHz                                  float64
	listEvents, intervals                  bool
	// level and nodes cut the tree (metric.Prune): toplev's -l and --nodes.
	level int
	nodes []string
}

// runTopdown computes Top-Down (to --level) from a perf stat recording, or
// prints the perf arguments that make one.
func runTopdown(f flags, td topdownFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "pmu_exporter topdown: "+format+"\n", args...)
		return 1
	}
	path, name := td.input, td.input
	if path == "" { // kingpin hands a lone "-" over as ""
		path, name = "-", "standard input"
	}
	var in *bufio.Reader
	header := ""
	if !td.listEvents {
		file, err := safeopen.Input("topdown FILE", path, safeopen.Recording, stdin)
		if err != nil {
			return fail("%v", err)
		}
		defer file.Close()
		in = bufio.NewReaderSize(file, headerPeek)
		header, _ = uarchInHeader(in)
	}
	ch, err := chooseTree(f, td, header, name, stderr)
	if err != nil {
		return fail("%v", err)
	}
	def, tree, err := buildTree(td, ch.uarch, stderr)
	if err != nil {
		return fail("%v", err)
	}
	if td.listEvents {
		fmt.Fprintf(stdout, "perf stat -x, -I 1000 -a %s -- sleep 10 2> recording.csv\n", shellJoin(topdown.PerfArgs(def, ch.corePMU)))
		return 0
	}
	params, err := topdownParams(f, td, tree, ch.auto, ch.pmus, stderr)
	if err != nil {
		return fail("%v", err)
	}
	r := evaluate(in, tree, params, td.format == "json" || td.intervals)
	switch {
	case r.read == 0 && r.err == nil:
		return fail("%s holds no perf stat values (record with the command from --list-events)", name)
	case !r.computed && r.err == nil && !r.hardware:
		return fail("%s holds software events only (a host without a PMU, as most VMs): Top-Down needs the core PMU's events; record where perf stat -e instructions counts, with the command from --list-events", name)
	case !r.computed && r.err == nil:
		return fail("no metric of the %s tree could be computed from %s: wrong --uarch, or recorded without the events of --list-events", ch.uarch, name)
	}
	for _, n := range r.notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	if td.format == "json" {
		writeTopdownJSON(stdout, ch.uarch, tree, r.intervals, r.summaries)
	} else {
		writeTopdownTable(stdout, tree, r.intervals, r.summaries, r.notes, td.intervals)
	}
	if r.err != nil {
		// Everything read before the bad line was computed and printed above.
		return fail("%s: %v", name, r.err)
	}
	return 0
}

// treeChoice is the tree a recording is computed with: its name, the core
// PMU it is recorded on (hybrids), and whether it is this host's (auto),
// with this host's PMUs then.
type treeChoice struct {
	uarch, corePMU string
	auto           bool
	pmus           []*pmu.PMU
}

// chooseTree takes --uarch, else the tree the recording's header names,
// else this host's.
func chooseTree(f flags, td topdownFlags, header, name string, stderr io.Writer) (treeChoice, error) {
	ch := treeChoice{uarch: td.uarch}
	switch {
	case ch.uarch != "":
	case header != "": // the recording says where it was made: not this host
		ch.uarch = header
		fmt.Fprintf(stderr, "note: --uarch %s, as %s's header names it\n", header, name)
	default:
		ch.auto = true
		ch.pmus, _ = pmu.Discover(f.opts.Sysfs()) // a PMU that cannot be read just leaves less to detect
		targets, err := topdown.ForHost(host.Read(f.opts.Procfs(), f.opts.Sysfs()).CPU, ch.pmus)
		if err != nil {
			return ch, fmt.Errorf("%v on this host; pass --uarch (one of %s) for a recording made elsewhere", err, strings.Join(topdown.Names(), ", "))
		}
		ch.uarch, ch.corePMU = targets[0].Uarch, targets[0].PMU
		fmt.Fprintf(stderr, "note: --uarch %s, detected on this host; pass --uarch for a recording made elsewhere\n", ch.uarch)
		if len(targets) > 1 {
			fmt.Fprintf(stderr, "note: this hybrid host's E-cores use --uarch %s; a recording has one core type's events\n", targets[1].Uarch)
		}
		return ch, nil
	}
	ch.corePMU = topdown.HybridPMU(ch.uarch) // where a hybrid part's tree is recorded
	return ch, nil
}

// buildTree is the built-in tree, extended by --definitions and cut to
// --level and --nodes, and compiled.
func buildTree(td topdownFlags, uarch string, stderr io.Writer) (*metric.Definition, *metric.Tree, error) {
	def, err := topdown.Builtin(uarch)
	if err != nil {
		return nil, nil, err
	}
	if td.definitions != "" {
		b, err := safeopen.ReadInput("--definitions", td.definitions, safeopen.YAML, nil)
		if err != nil {
			return nil, nil, err
		}
		if def, _, err = metric.Extend(def, td.definitions, b); err != nil {
			return nil, nil, err
		}
	}
	nodes := td.nodes
	if td.level > def.Levels() {
		fmt.Fprintf(stderr, "note: the %s tree goes to level %d, not %d\n", uarch, def.Levels(), td.level)
	}
	if def, err = def.Prune(td.level, nodes); err != nil {
		return nil, nil, fmt.Errorf("--level, --nodes: %w", err)
	}
	tree, err := def.Compile()
	return def, tree, err
}

// evaluated is what evaluate made of a recording.
type evaluated struct {
	intervals          []topdown.Interval // kept only when asked
	summaries          []topdown.Summary
	notes              []string
	read               int  // samples
	computed, hardware bool // some node computed; some event not a software one
	err                error
}

// evaluate reads the recording as it goes, one interval's samples at a
// time (topdown.Stream); only the intervals' results are kept, and only
// with keep.
func evaluate(in io.Reader, tree *metric.Tree, params map[string]float64, keep bool) evaluated {
	var r evaluated
	stream := topdown.NewStream(tree, params, func(iv topdown.Interval) {
		r.computed = r.computed || len(iv.Metrics) > 0
		if keep {
			r.intervals = append(r.intervals, iv)
		}
	})
	r.err = perfstat.Scan(in, func(s perfstat.Sample) error {
		r.read++
		r.hardware = r.hardware || !eventspec.CountsWithoutPMU(s.Event)
		stream.Add(s)
		return nil
	})
	r.summaries, r.notes = stream.Close()
	return r
}

// headerPeek is how much of a recording is looked at for its header.
const headerPeek = 64 << 10

// uarchNamed finds a tree's name in a header line: --uarch=X,
// --replay.uarch=X, or "(X)" after a CPU's name.
var uarchNamed = regexp.MustCompile(`--(?:replay\.)?uarch[= ]([a-z0-9-]+)|\(([a-z0-9-]+)\)`)

// uarchInHeader is the Top-Down tree a recording's leading comment lines
// name, if they name one of the built-in trees (examplegen's recordings
// do; a recording whose header says where it was made may).
func uarchInHeader(r *bufio.Reader) (string, bool) {
	head, _ := r.Peek(headerPeek) // fewer at the end of the input
	known := topdown.Names()
	for _, line := range strings.Split(string(head), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			break
		}
		for _, m := range uarchNamed.FindAllStringSubmatch(line, -1) {
			if u := m[1] + m[2]; slices.Contains(known, u) {
				return u, true
			}
		}
	}
	return "", false
}

func topdownParams(f flags, td topdownFlags, tree *metric.Tree, auto bool, pmus []*pmu.PMU, stderr io.Writer) (map[string]float64, error) {
	params := map[string]float64{}
	if tree.Input("smt_on") >= 0 {
		switch td.smt {
		case "on":
			params["smt_on"] = 1
		case "off":
			params["smt_on"] = 0
		default:
			on := false
			if auto {
				var err error
				if on, err = host.SMTActive(f.opts.Sysfs()); err != nil {
					return nil, fmt.Errorf("%v; pass --smt on or off", err)
				}
			} else {
				fmt.Fprintf(stderr, "note: --smt off assumed; pass --smt on if the recording host ran two threads per core\n")
			}
			params["smt_on"] = map[bool]float64{true: 1, false: 0}[on]
		}
	}
	if tree.Input("#slots") >= 0 {
		if td.slots > 0 {
			params["#slots"] = td.slots
		} else {
			slots := topdown.CoreSlots(pmus) // nil unless detected on this host
			if slots == 0 {
				return nil, fmt.Errorf("the %s tree needs the core's slots per cycle: pass --slots N (caps/slots of the recording host's PMU)", tree.Def.Name)
			}
			params["#slots"] = slots
		}
	}
	if topdown.NeedsTSC(tree) {
		switch {
		case td.tscHz > 0:
			topdown.SetTSC(params, td.tscHz)
		case auto:
			hz, err := collector.MeasureTSC(pmus, f.opts.Sysfs())
			if err != nil {
				return nil, fmt.Errorf("the %s tree's nodes below level 3 scale by the core frequency: %v; pass --tsc-hz", tree.Def.Name, err)
			}
			topdown.SetTSC(params, hz)
		default:
			return nil, fmt.Errorf("the %s tree's nodes below level 3 scale by the core frequency: pass --tsc-hz (the recording host's TSC frequency) or a lower --level", tree.Def.Name)
		}
	}
	return params, nil
}

type jsonInterval struct {
	Time    *float64           `json:"time,omitempty"`
	CPU     string             `json:"cpu"`
	Cgroup  string             `json:"cgroup,omitempty"`
	Metrics map[string]float64 `json:"metrics"`
}

// jsonSummary is the tree over the whole run of one cgroup (topdown.Summary).
type jsonSummary struct {
	Cgroup    string             `json:"cgroup,omitempty"`
	Intervals int                `json:"intervals"`
	Metrics   map[string]float64 `json:"metrics"`
	// Flagged are the nodes over their threshold (toplev's bottleneck
	// marks); absent where the tree's definitions give no thresholds.
	Flagged []string           `json:"flagged,omitempty"`
	Counts  map[string]float64 `json:"counts"`
	Partial []string           `json:"not_counted_throughout,omitempty"`
}

func writeTopdownJSON(w io.Writer, uarch string, tree *metric.Tree, intervals []topdown.Interval, summaries []topdown.Summary) {
	out := struct {
		Uarch     string         `json:"uarch"`
		Intervals []jsonInterval `json:"intervals"`
		Summary   []jsonSummary  `json:"summary"`
		// Thresholds says whether the tree's definitions give any.
		Thresholds bool `json:"thresholds"`
	}{Uarch: uarch, Intervals: []jsonInterval{}, Summary: []jsonSummary{}, Thresholds: hasThresholds(tree)}
	for _, iv := range intervals {
		j := jsonInterval{CPU: iv.CPU, Cgroup: iv.Cgroup, Metrics: iv.Metrics}
		if !math.IsNaN(iv.Time) {
			t := iv.Time
			j.Time = &t
		}
		out.Intervals = append(out.Intervals, j)
	}
	for _, s := range summaries {
		j := jsonSummary{Cgroup: s.Cgroup, Intervals: s.Intervals, Metrics: s.Metrics, Counts: s.Counts, Partial: s.Partial}
		for _, m := range tree.Def.Metrics {
			if s.Above[m.Name] {
				j.Flagged = append(j.Flagged, m.Name)
			}
		}
		out.Summary = append(out.Summary, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// hasThresholds says whether any node of the tree has a threshold: Intel's
// definitions give them, the AMD and Arm trees' none.
func hasThresholds(tree *metric.Tree) bool {
	for _, m := range tree.Def.Metrics {
		if m.Threshold != "" {
			return true
		}
	}
	return false
}

// writeTopdownTable prints the tree over the whole run (per cgroup), and
// with perInterval each interval's first; a node over its threshold is
// flagged as toplev flags the bottleneck, and a "-" is explained below.
func writeTopdownTable(w io.Writer, tree *metric.Tree, intervals []topdown.Interval, summaries []topdown.Summary, notes []string, perInterval bool) {
	children := map[string][]metric.Metric{}
	var roots []metric.Metric
	for _, m := range tree.Def.Metrics { // definition order reads best
		switch {
		case m.Level == 1:
			roots = append(roots, m)
		case m.Level > 1:
			children[m.Parent] = append(children[m.Parent], m)
		}
	}
	// The name column fits the deepest name: 22 wide at levels 1 and 2.
	width := 22
	for _, m := range tree.Def.Metrics {
		if m.Level > 0 {
			width = max(width, 2*(m.Level-1)+len(m.Name)+1)
		}
	}
	dashes := false
	printTree := func(values map[string]float64, above map[string]bool) {
		var print func(m metric.Metric, depth int)
		print = func(m metric.Metric, depth int) {
			v, ok := values[m.Name]
			val := "      -"
			if ok {
				val = fmt.Sprintf("%6.1f%%", 100*v)
			} else {
				dashes = true
			}
			flag := ""
			if above[m.Name] {
				flag = "  <=="
			}
			fmt.Fprintf(w, "  %-*s%-*s %s%s\n", 2*depth, "", width-2*depth, m.Name, val, flag)
			for _, c := range children[m.Name] {
				print(c, depth+1)
			}
		}
		for _, r := range roots {
			print(r, 0)
		}
		fmt.Fprintln(w)
	}
	if perInterval {
		for _, iv := range intervals {
			where := iv.CPU
			if iv.Cgroup != "" {
				where += "  cgroup " + iv.Cgroup
			}
			if math.IsNaN(iv.Time) {
				fmt.Fprintf(w, "%s\n", where)
			} else {
				fmt.Fprintf(w, "%.3f s  %s\n", iv.Time, where)
			}
			printTree(iv.Metrics, iv.Above)
		}
	}
	var partial []string
	for _, s := range summaries {
		where := "the whole run"
		if s.Cgroup != "" {
			where += ", cgroup " + s.Cgroup
		}
		fmt.Fprintf(w, "Summary of %s (%d intervals and CPUs: their counts summed, then the tree)\n", where, s.Intervals)
		printTree(s.Metrics, s.Above)
		partial = append(partial, s.Partial...)
	}
	if !hasThresholds(tree) {
		fmt.Fprintf(w, "No node is flagged: the %s tree's definitions give no thresholds (toplev's marks come from Intel's).\n", tree.Def.Name)
	}
	if dashes {
		fmt.Fprintln(w, "-: not computed, for want of an input:")
		for _, in := range slices.Compact(slices.Sorted(slices.Values(partial))) {
			fmt.Fprintf(w, "  %s was not counted in every interval: the summary leaves it out rather than sum part of the run\n", in)
		}
		for _, n := range notes {
			if strings.HasPrefix(n, "input ") { // the others are not about what is missing
				fmt.Fprintf(w, "  %s\n", n)
			}
		}
	}
}

func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "{},:=/ ") {
			out[i] = "'" + a + "'"
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}
