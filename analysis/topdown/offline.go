package topdown

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/perfstat"
)

// perfAliases are the names perf prints for events our trees call by Intel's
// names: the kernel's PERF_METRICS aliases and the generic events.
var perfAliases = map[string]string{
	"slots":                 "TOPDOWN.SLOTS:perf_metrics",
	"topdown-retiring":      "PERF_METRICS.RETIRING",
	"topdown-bad-spec":      "PERF_METRICS.BAD_SPECULATION",
	"topdown-fe-bound":      "PERF_METRICS.FRONTEND_BOUND",
	"topdown-be-bound":      "PERF_METRICS.BACKEND_BOUND",
	"topdown-heavy-ops":     "PERF_METRICS.HEAVY_OPERATIONS",
	"topdown-br-mispredict": "PERF_METRICS.BRANCH_MISPREDICTS",
	"topdown-fetch-lat":     "PERF_METRICS.FETCH_LATENCY",
	"topdown-mem-bound":     "PERF_METRICS.MEMORY_BOUND",
	"cycles":                "CPU_CLK_UNHALTED.THREAD",
	"cpu-cycles":            "CPU_CLK_UNHALTED.THREAD",
	"instructions":          "INST_RETIRED.ANY",
}

var (
	specName  = regexp.MustCompile(`(?:^|[/,])name=([^,/]+)`)
	modifiers = regexp.MustCompile(`:[ukhpPGHSDI]+$`)
	wrapper   = regexp.MustCompile(`^[A-Za-z0-9_]+/([^=/]+)/$`)
)

// Matcher maps the event names perf prints to a tree's inputs.
type Matcher struct {
	names map[string]int // lower-case name -> input slot
}

// NewMatcher indexes a tree's events by their names, their specs' name= terms
// and perf's aliases, case-insensitively.
func NewMatcher(t *metric.Tree) *Matcher {
	m := &Matcher{names: map[string]int{}}
	for _, ev := range t.Def.Events {
		slot := t.Input(ev.Name)
		m.names[strings.ToLower(ev.Name)] = slot
		if sm := specName.FindStringSubmatch(ev.Spec); sm != nil {
			m.names[strings.ToLower(sm[1])] = slot
		}
	}
	for alias, name := range perfAliases {
		if slot := t.Input(name); slot >= 0 {
			m.names[alias] = slot
		}
	}
	return m
}

// Input returns the input slot for a printed event name, or -1.
func (m *Matcher) Input(event string) int {
	e := strings.ToLower(strings.TrimSpace(event))
	for i := 0; i < 3; i++ {
		if slot, ok := m.names[e]; ok {
			return slot
		}
		switch {
		case wrapper.MatchString(e): // cpu_core/topdown-fe-bound/ -> topdown-fe-bound
			e = wrapper.FindStringSubmatch(e)[1]
		case modifiers.MatchString(e): // cycles:u -> cycles
			e = modifiers.ReplaceAllString(e, "")
		default:
			return -1
		}
	}
	return -1
}

// Interval is the tree computed for one perf interval and CPU.
type Interval struct {
	Time    float64 // NaN without -I
	CPU     string  // "all", or perf's CPU name with -A
	Cgroup  string  // perf -G's cgroup, "" for the whole CPU
	Metrics map[string]float64
	Above   map[string]bool
}

// Offline evaluates a tree over perf stat samples, one result per interval,
// CPU and cgroup (perf -G), in input order. params gives smt_on, #slots and the like. A metric whose
// inputs perf did not count is left out, and notes say which and why.
func Offline(t *metric.Tree, samples []perfstat.Sample, params map[string]float64) ([]Interval, []string) {
	match := NewMatcher(t)
	ev := t.NewEvaluator()
	var notes []string
	ignored := map[string]bool{}
	missing := map[string]string{} // input -> why
	type key struct {
		time, cpu, cgroup string
	}
	var order []key
	byKey := map[key][]perfstat.Sample{}
	seen := map[int]bool{} // the input slots the recording has
	for _, s := range samples {
		if slot := match.Input(s.Event); slot >= 0 {
			seen[slot] = true
		}
		k := key{fmt.Sprint(s.Time), s.CPU, s.Cgroup}
		if _, seen := byKey[k]; !seen {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], s)
	}
	var out []Interval
	for _, k := range order {
		ev.Reset()
		for name, v := range params {
			if i := t.Input(name); i >= 0 {
				ev.Set(i, v)
			}
		}
		group := byKey[k]
		for _, s := range group {
			slot := match.Input(s.Event)
			if slot < 0 {
				ignored[s.Event] = true
				continue
			}
			if s.Missing() {
				missing[t.Inputs[slot]] = s.Status
			}
			ev.Set(slot, s.Value)
		}
		iv := Interval{Time: group[0].Time, CPU: k.cpu, Cgroup: k.cgroup}
		if iv.CPU == "" {
			iv.CPU = "all"
		}
		iv.Metrics, iv.Above = evalNodes(t, ev)
		out = append(out, iv)
	}
	// Say once, for the whole file, what could not be computed and why.
	for _, in := range t.Inputs {
		_, isParam := params[in]
		switch {
		case isParam:
		case !seen[t.Input(in)]:
			notes = append(notes, fmt.Sprintf("input %s is not in the recording; metrics that need it are left out (see --list-events)", in))
		case missing[in] != "":
			notes = append(notes, fmt.Sprintf("input %s was %s in some intervals; metrics that need it are left out there", in, missing[in]))
		}
	}
	var ign []string
	for e := range ignored {
		ign = append(ign, e)
	}
	sort.Strings(ign)
	if len(ign) > 0 {
		notes = append(notes, "events not used by the "+t.Def.Name+" tree: "+strings.Join(ign, ", "))
	}
	return out, notes
}

// evalNodes evaluates the tree on what ev was given, and returns each
// node (level 1 and deeper) that could be computed, and whether its
// threshold holds.
func evalNodes(t *metric.Tree, ev *metric.Evaluator) (map[string]float64, map[string]bool) {
	ev.Eval()
	values, above := map[string]float64{}, map[string]bool{}
	for _, m := range t.Metrics() {
		if m.Level < 1 {
			continue
		}
		if v := ev.Value(m.Name); !math.IsNaN(v) {
			values[m.Name] = v
			above[m.Name] = ev.Above(m.Name)
		}
	}
	return values, above
}

// Summary is the tree over a whole recording for one cgroup ("" for the
// whole CPUs): its inputs summed over every interval and CPU, so that
// each node is weighed by the slots (or cycles) of each interval, as
// toplev's summary is. Counts are the sums it rests on; an input that was
// not counted in some interval is left out of them (and the nodes that
// need it), rather than summed over part of the run.
type Summary struct {
	Cgroup    string
	Intervals int // the (interval, CPU) pairs summed
	Metrics   map[string]float64
	Above     map[string]bool
	Counts    map[string]float64
	// Partial names the inputs left out for not being counted throughout.
	Partial []string
}

// Summarize is the tree over the whole of samples, one Summary per cgroup
// in input order.
func Summarize(t *metric.Tree, samples []perfstat.Sample, params map[string]float64) []Summary {
	match := NewMatcher(t)
	ev := t.NewEvaluator()
	type sums struct {
		sum           []float64
		seen, missing []bool
		intervals     map[string]bool
	}
	var order []string
	by := map[string]*sums{}
	for _, s := range samples {
		a := by[s.Cgroup]
		if a == nil {
			n := len(t.Inputs)
			a = &sums{sum: make([]float64, n), seen: make([]bool, n), missing: make([]bool, n), intervals: map[string]bool{}}
			by[s.Cgroup] = a
			order = append(order, s.Cgroup)
		}
		a.intervals[fmt.Sprint(s.Time)+"\x00"+s.CPU] = true
		slot := match.Input(s.Event)
		switch {
		case slot < 0:
		case s.Missing():
			a.missing[slot] = true
		default:
			a.seen[slot] = true
			a.sum[slot] += s.Value
		}
	}
	var out []Summary
	for _, cg := range order {
		a := by[cg]
		ev.Reset()
		for name, v := range params {
			if i := t.Input(name); i >= 0 {
				ev.Set(i, v)
			}
		}
		sm := Summary{Cgroup: cg, Intervals: len(a.intervals), Counts: map[string]float64{}}
		for slot, in := range t.Inputs {
			switch {
			case a.missing[slot]:
				sm.Partial = append(sm.Partial, in)
			case a.seen[slot]:
				ev.Set(slot, a.sum[slot])
				sm.Counts[in] = a.sum[slot]
			}
		}
		sm.Metrics, sm.Above = evalNodes(t, ev)
		out = append(out, sm)
	}
	return out
}

// PerfArgs returns the perf stat -e arguments that record what a tree needs, one
// {group} per definition group, so the values come from the same schedule.
func PerfArgs(d *metric.Definition, corePMU string) []string {
	spec := map[string]string{}
	for _, e := range d.Events {
		spec[e.Name] = onPMU(e.Spec, corePMU)
	}
	var args []string
	inGroup := map[string]bool{}
	for _, g := range d.Groups {
		var specs []string
		for _, name := range g {
			specs = append(specs, spec[name])
			inGroup[name] = true
		}
		args = append(args, "-e", "{"+strings.Join(specs, ",")+"}")
	}
	for _, e := range d.Events {
		if !inGroup[e.Name] {
			args = append(args, "-e", spec[e.Name])
		}
	}
	return args
}

// onPMU writes a tree's event for perf on a hybrid host, where a core event must
// name its PMU: cpu/.../ and bare names (slots, topdown-*, cycles) go on corePMU.
func onPMU(spec, corePMU string) string {
	switch {
	case corePMU == "":
		return spec
	case strings.HasPrefix(spec, "cpu/"):
		return corePMU + strings.TrimPrefix(spec, "cpu")
	case !strings.Contains(spec, "/"):
		return corePMU + "/" + spec + "/"
	}
	return spec
}
