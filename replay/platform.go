package replay

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/pmu-exporter/pmu_exporter/plan/platform"
)

// platformEvent is a recorded event that a platform PMU counted: what it
// is, and the factor from the value perf printed (Joules, MiB, a count)
// to the counter's unit.
type platformEvent struct {
	c         platform.Counter
	toCounter float64
}

// energyUnit is what a replayed energy count counts: RAPL's usual 2^-32 J,
// fine enough for the hundredths of a joule perf prints.
const energyUnit = 0x1p-32

// PlatformEvents are the recording's events that platform PMUs counted
// (energy, MSRs, C-state residency, memory and LLC-miss traffic), by the
// names perf printed, sorted; an error names the line of one whose unit
// is not what perf prints for it, or a cgroup's (platform counts are the
// node's).
func (rec *Recording) PlatformEvents() ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, iv := range rec.Intervals {
		for _, s := range iv.Samples {
			_, _, ok, err := platform.Recorded(s.Event, s.Unit)
			switch {
			case err != nil:
				return nil, fmt.Errorf("%s: line %d: %w", rec.Name, s.Line, err)
			case ok && s.Cgroup != "":
				return nil, fmt.Errorf("%s: line %d: platform event %s counted in cgroup %s: it counts the whole package", rec.Name, s.Line, s.Event, s.Cgroup)
			case ok && !seen[s.Event]:
				seen[s.Event] = true
				out = append(out, s.Event)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// platformKey is one platform event on one CPU.
type platformKey struct {
	event string
	cpu   int
}

// addPlatform folds a node-level sample into its platform counter, if a
// platform PMU counted it: in the counter's unit, per CPU as recorded.
func (p *Player) addPlatform(event, unit string, cpu int, v float64) {
	pe, known := p.platformOf[event]
	if !known {
		if c, f, ok, err := platform.Recorded(event, unit); ok && err == nil {
			pe = &platformEvent{c, f}
		}
		p.platformOf[event] = pe
	}
	if pe == nil || math.IsNaN(v) {
		return
	}
	if cpu == noCPU && (pe.c.Kind == platform.MSR || pe.c.Kind == platform.CoreCState) {
		return // a per-CPU register summed over the system names no CPU
	}
	p.platform[platformKey{event, cpu}] += v * pe.toCounter
}

// Platform is the recording's platform counters as the live exporter's
// platform source reads them.
func (p *Player) Platform() *PlatformView { return &PlatformView{p} }

// PlatformView reads a Player's platform totals.
type PlatformView struct{ p *Player }

// Read gives each platform counter's total on each CPU it was recorded
// on: energy in units of 2^-32 J (Scale), bytes, and counts.
// They are copied before fn runs, so that fn may call PackageOf.
func (v *PlatformView) Read(fn func(c *platform.Counter, cpu int, count uint64)) error {
	type read struct {
		c     platform.Counter
		cpu   int
		count uint64
	}
	v.p.mu.Lock()
	reads := make([]read, 0, len(v.p.platform))
	for _, k := range v.keys() {
		c := v.p.platformOf[k.event].c
		total := v.p.platform[k]
		if c.Kind == platform.Energy {
			c.Scale = energyUnit
			total /= energyUnit
		}
		reads = append(reads, read{c, k.cpu, uint64(math.Round(total))})
	}
	v.p.mu.Unlock()
	for i := range reads {
		fn(&reads[i].c, reads[i].cpu, reads[i].count)
	}
	return nil
}

func (v *PlatformView) keys() []platformKey {
	keys := make([]platformKey, 0, len(v.p.platform))
	for k := range v.p.platform {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b platformKey) int {
		if a.event != b.event {
			if a.event < b.event {
				return -1
			}
			return 1
		}
		return a.cpu - b.cpu
	})
	return keys
}

// PackageOf names the package of a CPU that package-wide counters were
// read on: perf stat -A prints them on the CPUs of their PMUs' cpumasks,
// one per package, so the first such CPU is package 0, the next 1, and
// so on; "all" for a recording without -A (summed over packages).
func (v *PlatformView) PackageOf(cpu int) string {
	if cpu == noCPU {
		return "all"
	}
	v.p.mu.Lock()
	defer v.p.mu.Unlock()
	var cpus []int
	for k := range v.p.platform {
		if kind := v.p.platformOf[k.event].c.Kind; kind != platform.MSR && kind != platform.CoreCState && !slices.Contains(cpus, k.cpu) {
			cpus = append(cpus, k.cpu)
		}
	}
	slices.Sort(cpus)
	if i := slices.Index(cpus, cpu); i >= 0 {
		return strconv.Itoa(i)
	}
	return "cpu" + strconv.Itoa(cpu)
}
