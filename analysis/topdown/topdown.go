// Package topdown holds the built-in Top-Down (TMA) trees, levels 1 and 2, one
// metric.Definition per micro-architecture family, written by us from the
// formulas Intel, AMD and Arm publish, and picks the tree for a CPU. Node names
// are the same for every vendor: frontend_bound, bad_speculation, backend_bound,
// retiring (and smt_contention on AMD) at level 1; fetch_latency,
// fetch_bandwidth, branch_mispredicts, machine_clears, memory_bound, core_bound,
// light_operations and heavy_operations at level 2.
package topdown

import (
	"embed"
	"fmt"
	"sort"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
)

//go:embed defs/*.yaml defs/overrides/*.yaml defs/deep/*.yaml
var defs embed.FS

// sameTree maps micro-architectures to the family whose formulas they share
// (identical level 1 and 2 formulas in Intel's published metrics); where a
// part's deeper levels differ, its defs/overrides file replaces, adds or
// drops those nodes (Builtin).
var sameTree = map[string]string{
	"skl": "skx", "clx": "skx",
	"icl": "icx",
	"emr": "spr", "gnr": "spr",
	"adl":         "spr", // Alder/Raptor Lake P-cores (cpu_core): Golden Cove, as Sapphire Rapids; E-cores: grt
	"neoverse-v2": "neoverse-n2",
}

// Names lists every micro-architecture with a built-in tree.
func Names() []string {
	entries, _ := defs.ReadDir("defs")
	var names []string
	for _, e := range entries {
		if !e.IsDir() { // defs/overrides holds parts' changes to a shared tree
			names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
		}
	}
	for alias := range sameTree {
		names = append(names, alias)
	}
	sort.Strings(names)
	return names
}

// Depth is the built-in trees that have Levels levels (Builtin's, the
// generated deep ones included).
type Depth struct {
	Levels int
	Trees  []string
}

// Depths groups the built-in trees by their depth, shallowest first, so
// that what says how deep --collector.topdown.level goes on which tree
// comes from the trees, not from a list kept by hand.
func Depths() ([]Depth, error) {
	byLevels := map[int][]string{}
	for _, name := range Names() {
		d, err := Builtin(name)
		if err != nil {
			return nil, err
		}
		byLevels[d.Levels()] = append(byLevels[d.Levels()], name)
	}
	var out []Depth
	for levels, trees := range byLevels {
		out = append(out, Depth{levels, trees})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Levels < out[j].Levels })
	return out, nil
}

// Builtin returns the definition for a micro-architecture name: the
// hand-written tree (BuiltinAuthored) and, on Intel's P-cores, the nodes
// below level 3 generated from Intel's metrics (defs/deep, by
// internal/tmadeep).
func Builtin(uarch string) (*metric.Definition, error) {
	d, err := BuiltinAuthored(uarch)
	if err != nil {
		return nil, err
	}
	b, err := defs.ReadFile("defs/deep/" + uarch + ".yaml")
	if err != nil {
		return d, nil
	}
	deep, err := metric.Parse("topdown/defs/deep/"+uarch+".yaml", b)
	if err != nil {
		return nil, err
	}
	return d.Override(deep), nil
}

// BuiltinAuthored returns the hand-written definition for a
// micro-architecture name: the family's tree (sameTree) with the part's
// overrides.
func BuiltinAuthored(uarch string) (*metric.Definition, error) {
	file := uarch
	if f, ok := sameTree[uarch]; ok {
		file = f
	}
	b, err := defs.ReadFile("defs/" + file + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no built-in Top-Down tree for %q (have: %s)", uarch, strings.Join(Names(), ", "))
	}
	d, err := metric.Parse("topdown/defs/"+file+".yaml", b)
	if err != nil {
		return nil, err
	}
	d.Name = uarch // adl, not spr: the name says which part's tree is in use
	if o, err := defs.ReadFile("defs/overrides/" + uarch + ".yaml"); err == nil {
		over, err := metric.Parse("topdown/defs/overrides/"+uarch+".yaml", o)
		if err != nil {
			return nil, err
		}
		// What the family's tree counts for the nodes the part replaced
		// or dropped is not the part's to count.
		return d.Override(over).Prune(0, nil)
	}
	return d, nil
}

// Intel's constants that its nodes below level 3 scale by the core
// frequency with (contested_accesses, l3_hit_latency, local_mem…): its
// formulas make the core's GHz as the turbo ratio times SYSTEM_TSC_FREQ /
// 1e9 / (DURATIONTIMEINMILLISECONDS / 1000). Per CPU and interval that
// quotient is the TSC's frequency, so the trees take SYSTEM_TSC_FREQ as
// the TSC's rate in Hz over a 1000 ms duration (SetTSC).
const (
	ParamTSC      = "SYSTEM_TSC_FREQ"
	ParamDuration = "DURATIONTIMEINMILLISECONDS"
)

// NeedsTSC says whether a tree has nodes scaled by the core frequency,
// whose params SetTSC gives.
func NeedsTSC(t *metric.Tree) bool { return t.Input(ParamTSC) >= 0 || t.Input(ParamDuration) >= 0 }

// SetTSC gives params the TSC's frequency in Hz, as NeedsTSC's nodes take
// it.
func SetTSC(params map[string]float64, tscHz float64) {
	params[ParamTSC], params[ParamDuration] = tscHz, 1000
}
