package replay

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/perfstat"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// noCPU keys a recording made without -A: the whole system as one series.
const noCPU = -1

// Player folds a Recording's intervals into running totals, one interval per
// Step, wrapping around at the end.
type Player struct {
	rec    *Recording
	tree   *metric.Tree // nil: no Top-Down
	match  *topdown.Matcher
	inputs int // event inputs of tree

	mu     sync.Mutex
	next   int
	cycles uint64
	events []*eventAcc // node-level, in first-seen order
	byName map[string]*eventAcc
	cpuTD  *topdown.Keyed
	cpus   map[int]bool // keys of cpuTD
	cgTD   *topdown.Keyed
	cgs    map[string]*cgroupAcc
	// platform holds the platform PMUs' totals (platform.go), and
	// platformOf each event's kind, nil for the others.
	platform   map[platformKey]float64
	platformOf map[string]*platformEvent
}

type eventAcc struct {
	name, pmu        string
	counts           map[int]float64
	enabled, running map[int]float64 // ns
	notRunning       uint64
}

type cgroupAcc struct {
	key    uint64 // in cgTD
	id     podcgroup.Identity
	events map[string]float64
	order  []string
}

// NewPlayer plays rec; tree (nil for none) is evaluated on every interval
// with params (smt_on, #slots).
func NewPlayer(rec *Recording, tree *metric.Tree, params map[string]float64) *Player {
	p := &Player{rec: rec, tree: tree, byName: map[string]*eventAcc{}, cpus: map[int]bool{}, cgs: map[string]*cgroupAcc{},
		platform: map[platformKey]float64{}, platformOf: map[string]*platformEvent{}}
	if tree != nil {
		p.match = topdown.NewMatcher(tree)
		var names []string
		for _, e := range tree.Def.Events {
			names = append(names, e.Name)
		}
		p.inputs = len(names)
		p.cpuTD = topdown.NewKeyed(tree, names, params)
		p.cgTD = topdown.NewKeyed(tree, names, params)
	}
	return p
}

// Run steps through the recording at its recorded pace until ctx ends: each
// interval is folded in once its recorded length has passed. observe, if not
// nil, gets each step's duration in seconds (the replay's read cycle).
func (p *Player) Run(ctx context.Context, observe func(seconds float64)) {
	for {
		p.mu.Lock()
		wait := p.rec.Intervals[p.next].Length
		p.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		start := time.Now()
		p.Step()
		if observe != nil {
			observe(time.Since(start).Seconds())
		}
	}
}

// Cycles is the number of intervals folded in so far, across loops.
func (p *Player) Cycles() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cycles
}

// sampleKey identifies one value of an interval: perf prints an event once per
// group that holds it, and, as the live pipeline does, only the first counts.
type sampleKey struct {
	cpu           int
	cgroup, event string
}

// Step folds in the next interval.
func (p *Player) Step() {
	p.mu.Lock()
	defer p.mu.Unlock()
	iv := p.rec.Intervals[p.next]
	p.next = (p.next + 1) % len(p.rec.Intervals)
	p.cycles++

	seen := map[sampleKey]bool{}
	td := map[int][]float64{}        // per CPU, node level
	cgTD := map[string][]float64{}   // per cgroup, summed over CPUs
	cgCounted := map[string][]bool{} // per cgroup, inputs some CPU counted
	for _, s := range iv.Samples {
		cpu := noCPU
		if s.CPU != "" {
			cpu, _ = cpuNumber(s.CPU) // checked by Load
		}
		k := sampleKey{cpu, s.Cgroup, s.Event}
		if seen[k] {
			continue
		}
		seen[k] = true
		v := value(s)
		slot := -1
		if p.match != nil {
			if slot = p.match.Input(s.Event); slot >= p.inputs {
				slot = -1 // a param's name, never an event
			}
		}
		if s.Cgroup != "" {
			cg := p.cgroup(s.Cgroup)
			if !s.Missing() {
				if _, ok := cg.events[s.Event]; !ok {
					cg.order = append(cg.order, s.Event)
				}
				cg.events[s.Event] += v
			}
			if slot >= 0 {
				if cgTD[s.Cgroup] == nil {
					cgTD[s.Cgroup], cgCounted[s.Cgroup] = make([]float64, p.inputs), make([]bool, p.inputs)
				}
				if !s.Missing() {
					cgTD[s.Cgroup][slot] += s.Value
					cgCounted[s.Cgroup][slot] = true
				}
			}
			continue
		}
		p.addNode(s, cpu, v)
		p.addPlatform(s.Event, s.Unit, cpu, s.Value)
		if slot >= 0 {
			if td[cpu] == nil {
				td[cpu] = nanSlice(p.inputs)
			}
			td[cpu][slot] = s.Value
		}
	}
	for cpu, counts := range td {
		p.cpus[cpu] = true
		p.cpuTD.Add(uint64(cpu+1), counts)
	}
	for name, counts := range cgTD {
		for i, ok := range cgCounted[name] {
			if !ok {
				counts[i] = math.NaN() // no CPU counted it: missing, not zero
			}
		}
		p.cgTD.Add(p.cgs[name].key, counts)
	}
}

func (p *Player) addNode(s perfstat.Sample, cpu int, v float64) {
	e := p.byName[s.Event]
	if e == nil {
		e = &eventAcc{name: s.Event, pmu: pmuOf(s.Event), counts: map[int]float64{}, enabled: map[int]float64{}, running: map[int]float64{}}
		p.byName[s.Event] = e
		p.events = append(p.events, e)
	}
	if s.Missing() || s.Running == 0 {
		e.notRunning++
		return
	}
	e.counts[cpu] += v
	if !math.IsNaN(s.RunNS) {
		e.running[cpu] += s.RunNS
		if !math.IsNaN(s.Running) {
			e.enabled[cpu] += s.RunNS * 100 / s.Running
		}
	}
}

func (p *Player) cgroup(name string) *cgroupAcc {
	cg := p.cgs[name]
	if cg == nil {
		id, _ := podcgroup.Parse(cgroupPath(name))
		cg = &cgroupAcc{key: uint64(len(p.cgs) + 1), id: id, events: map[string]float64{}}
		p.cgs[name] = cg
	}
	return cg
}

// cgroupPath turns perf -G's name (relative to the cgroup mount) into the
// path the live exporter labels cgroups with.
func cgroupPath(name string) string { return "/" + strings.Trim(name, "/") }

// value is a sample in the live engine's units: perf prints the clocks in
// msec, the kernel counts them in ns.
func value(s perfstat.Sample) float64 {
	if s.Unit == "msec" {
		return s.Value * 1e6
	}
	return s.Value
}

// pmuOf is the PMU an event spec names (cpu_core/.../ -> cpu_core), "" for a
// bare event name.
func pmuOf(event string) string {
	if pmu, rest, ok := strings.Cut(event, "/"); ok && rest != "" && !strings.ContainsAny(pmu, "=,") {
		return pmu
	}
	return ""
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// Snapshot returns the node-level totals as the counting engine does: one
// group per event (perf stat's output does not say which events shared a
// group), each with its enabled and running time.
func (p *Player) Snapshot() model.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := model.Snapshot{ReadErrors: map[string]uint64{}, Cycles: p.cycles}
	for _, e := range p.events {
		et := model.EventTotals{Group: e.name, Event: e.name, PMU: e.pmu, Scale: 1, PerCPU: map[int]uint64{}}
		g := model.GroupTotals{Name: e.name, EnabledNS: map[int]uint64{}, RunningNS: map[int]uint64{},
			NotRunning: e.notRunning, Failures: map[model.OpenReason]int{}}
		for cpu, v := range e.counts {
			et.PerCPU[cpu] = uint64(math.Round(v))
			g.EnabledNS[cpu] = uint64(math.Round(e.enabled[cpu]))
			g.RunningNS[cpu] = uint64(math.Round(e.running[cpu]))
		}
		g.OpenCPUs = len(e.counts)
		s.Events = append(s.Events, et)
		s.Groups = append(s.Groups, g)
	}
	return s
}

// Topdown is the node's Top-Down slot counters, for exporter.NewTopdown; nil
// without a tree.
func (p *Player) Topdown() *TopdownView {
	if p.tree == nil {
		return nil
	}
	return &TopdownView{p}
}

// TopdownView reads a Player's per-CPU Top-Down.
type TopdownView struct{ p *Player }

// TotalsPerCPU returns the slots accumulated per CPU (CPU -1 for a recording
// without -A) and the containment violations.
func (v *TopdownView) TotalsPerCPU() (slots map[int]float64, nodes map[int][]topdown.Node, violations map[string]uint64) {
	p := v.p
	p.mu.Lock()
	defer p.mu.Unlock()
	slots, nodes = map[int]float64{}, map[int][]topdown.Node{}
	for cpu := range p.cpus {
		if s, n, ok := p.cpuTD.Totals(uint64(cpu + 1)); ok {
			slots[cpu], nodes[cpu] = s, n
		}
	}
	return slots, nodes, p.cpuTD.Violations()
}

// Totals is TotalsPerCPU summed over CPUs.
func (v *TopdownView) Totals() (slots float64, nodes []topdown.Node, violations map[string]uint64) {
	perCPU, byCPU, violations := v.TotalsPerCPU()
	slots, nodes = topdown.SumCPUs(perCPU, byCPU)
	return slots, nodes, violations
}

// Cgroups is the per-cgroup view, for exporter.NewCgroup; nil when the
// recording has no cgroup column.
func (p *Player) Cgroups() *CgroupView {
	if !p.rec.Cgroups {
		return nil
	}
	return &CgroupView{p}
}

// CgroupView reads a Player's per-cgroup totals.
type CgroupView struct{ p *Player }

// Snapshot returns every cgroup of the recording seen so far, by path.
func (v *CgroupView) Snapshot() model.CgroupSnapshot {
	p := v.p
	p.mu.Lock()
	defer p.mu.Unlock()
	s := model.CgroupSnapshot{Tracked: len(p.cgs), Errors: map[string]uint64{}, TopDown: p.tree != nil}
	for name, cg := range p.cgs {
		c := model.Cgroup{Path: cgroupPath(name), Identity: cg.id}
		for _, e := range cg.order {
			c.Events = append(c.Events, model.Count{Event: e, Value: cg.events[e]})
		}
		if p.tree != nil {
			c.Slots, c.Nodes, c.HasSlots = p.cgTD.Totals(cg.key)
		}
		s.Cgroups = append(s.Cgroups, c)
	}
	slices.SortFunc(s.Cgroups, func(a, b model.Cgroup) int { return strings.Compare(a.Path, b.Path) })
	return s
}

// Names gives the pod names of the recording's "# pod" lines, as the
// Kubernetes API does live (exporter.PodNames).
func (v *CgroupView) Names(id podcgroup.Identity) (namespace, pod, container string, ok bool) {
	pd, ok := v.p.rec.Pods[id.PodUID]
	if !ok {
		return "", "", "", false
	}
	container = pd.Containers[id.ContainerID]
	if container == "" {
		container = id.ContainerID // a container the lines do not name
	}
	return pd.Namespace, pd.Name, container, true
}
