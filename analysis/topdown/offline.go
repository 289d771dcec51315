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
	var out []Interval
	s := NewStream(t, params, func(iv Interval) { out = append(out, iv) })
	for _, smp := range samples {
		s.Add(smp)
	}
	_, notes := s.Close()
	return out, notes
}

// Stream evaluates a tree over perf stat samples as they are read, as
// Offline and Summarize do over them all: each interval (per CPU and
// cgroup) is handed on once a sample of a later time comes, and the
// summaries are running sums, so that a recording is held one interval
// at a time. perf stat -I prints an interval's lines together; a time
// seen again after others is evaluated again, apart.
type Stream struct {
	t      *metric.Tree
	params map[string]float64
	match  *Matcher
	ev     *metric.Evaluator
	emit   func(Interval)
	// The current time's samples, by key in the order first seen.
	time  string
	order []streamKey
	byKey map[streamKey][]perfstat.Sample
	// For the notes: the input slots the recording has, the events no
	// input takes, and the inputs perf did not count somewhere (why).
	seen    map[int]bool
	ignored map[string]bool
	missing map[string]string
	// The summaries' running sums, by cgroup in the order first seen.
	sums     map[string]*runningSums
	sumOrder []string
}

type streamKey struct{ cpu, cgroup string }

// runningSums are one cgroup's inputs summed over the run so far.
type runningSums struct {
	sum           []float64
	seen, missing []bool
	intervals     int // (interval, CPU) pairs
}

// NewStream evaluates t with params, handing each interval to emit.
func NewStream(t *metric.Tree, params map[string]float64, emit func(Interval)) *Stream {
	return &Stream{t: t, params: params, match: NewMatcher(t), ev: t.NewEvaluator(), emit: emit,
		byKey: map[streamKey][]perfstat.Sample{}, seen: map[int]bool{}, ignored: map[string]bool{},
		missing: map[string]string{}, sums: map[string]*runningSums{}}
}

// Add takes the next sample in input order.
func (s *Stream) Add(smp perfstat.Sample) {
	if tm := fmt.Sprint(smp.Time); tm != s.time {
		s.flush()
		s.time = tm
	}
	k := streamKey{smp.CPU, smp.Cgroup}
	if _, ok := s.byKey[k]; !ok {
		s.order = append(s.order, k)
	}
	s.byKey[k] = append(s.byKey[k], smp)
	slot := s.match.Input(smp.Event)
	if slot >= 0 {
		s.seen[slot] = true
	}
	a := s.sums[smp.Cgroup]
	if a == nil {
		n := len(s.t.Inputs)
		a = &runningSums{sum: make([]float64, n), seen: make([]bool, n), missing: make([]bool, n)}
		s.sums[smp.Cgroup] = a
		s.sumOrder = append(s.sumOrder, smp.Cgroup)
	}
	switch {
	case slot < 0:
	case smp.Missing():
		a.missing[slot] = true
	default:
		a.seen[slot] = true
		a.sum[slot] += smp.Value
	}
}

// flush evaluates the current time's intervals and hands them on.
func (s *Stream) flush() {
	for _, k := range s.order {
		s.sums[k.cgroup].intervals++
		s.reset()
		group := s.byKey[k]
		for _, smp := range group {
			slot := s.match.Input(smp.Event)
			if slot < 0 {
				s.ignored[smp.Event] = true
				continue
			}
			if smp.Missing() {
				s.missing[s.t.Inputs[slot]] = smp.Status
			}
			s.ev.Set(slot, smp.Value)
		}
		iv := Interval{Time: group[0].Time, CPU: k.cpu, Cgroup: k.cgroup}
		if iv.CPU == "" {
			iv.CPU = "all"
		}
		iv.Metrics, iv.Above = evalNodes(s.t, s.ev)
		s.emit(iv)
	}
	s.order = s.order[:0]
	clear(s.byKey)
}

// reset clears the evaluator to the parameters alone.
func (s *Stream) reset() {
	s.ev.Reset()
	for name, v := range s.params {
		if i := s.t.Input(name); i >= 0 {
			s.ev.Set(i, v)
		}
	}
}

// Close hands on the last intervals, and returns the summaries
// (Summarize's) and the notes (Offline's): said once, for the whole
// recording, what could not be computed and why.
func (s *Stream) Close() ([]Summary, []string) {
	s.flush()
	var notes []string
	for _, in := range s.t.Inputs {
		_, isParam := s.params[in]
		switch {
		case isParam:
		case !s.seen[s.t.Input(in)]:
			notes = append(notes, fmt.Sprintf("input %s is not in the recording; metrics that need it are left out (see --list-events)", in))
		case s.missing[in] != "":
			notes = append(notes, fmt.Sprintf("input %s was %s in some intervals; metrics that need it are left out there", in, s.missing[in]))
		}
	}
	var ign []string
	for e := range s.ignored {
		ign = append(ign, e)
	}
	sort.Strings(ign)
	if len(ign) > 0 {
		notes = append(notes, "events not used by the "+s.t.Def.Name+" tree: "+strings.Join(ign, ", "))
	}
	var out []Summary
	for _, cg := range s.sumOrder {
		a := s.sums[cg]
		s.reset()
		sm := Summary{Cgroup: cg, Intervals: a.intervals, Counts: map[string]float64{}}
		for slot, in := range s.t.Inputs {
			switch {
			case a.missing[slot]:
				sm.Partial = append(sm.Partial, in)
			case a.seen[slot]:
				s.ev.Set(slot, a.sum[slot])
				sm.Counts[in] = a.sum[slot]
			}
		}
		sm.Metrics, sm.Above = evalNodes(s.t, s.ev)
		out = append(out, sm)
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
	st := NewStream(t, params, func(Interval) {})
	for _, smp := range samples {
		st.Add(smp)
	}
	sums, _ := st.Close()
	return sums
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
