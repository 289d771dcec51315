// Command skx writes examples/replay/skx-synthetic.csv: a made-up `perf stat -x, -I 2000 -A -a`
// recording of a 2-CPU Skylake-SP node running three pods, one of which has
// a bad-speculation spike. Its counts are derived from chosen Top-Down
// fractions through skx's formulas (SMT off), so the exporter computes those
// fractions back. Run from the repository root: go run ./internal/examplegen/skx > examples/replay/skx-synthetic.csv
package main

import (
	"fmt"
	"math"
	"os"
)

type profile struct {
	fe, bs, ret      float64 // level 1 (backend is the rest)
	fetchLat, brMisp float64 // shares of frontend and bad speculation
	mem, heavy       float64 // shares of backend and retiring
}

type pod struct {
	uid, ns, name, container, id string
	busy                         float64 // share of each CPU's cycles
	prof                         profile
}

const (
	intervals = 20
	seconds   = 2.0
	hz        = 2.4e9
	cpus      = 2
)

var pods = []pod{
	{"5f0d6a3e-8c1b-4e2a-9d7f-0a1b2c3d4e5f", "shop", "checkout-7d9f8", "web",
		"a1c2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f80910", 0.35,
		profile{fe: 0.30, bs: 0.06, ret: 0.34, fetchLat: 0.6, brMisp: 0.8, mem: 0.4, heavy: 0.1}},
	{"6e1c7b4f-9d2a-4f3b-8e6a-1b2c3d4e5f60", "shop", "search-5c4b3", "search",
		"b2d3f4051627384950a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a1", 0.25,
		profile{fe: 0.10, bs: 0.04, ret: 0.26, fetchLat: 0.5, brMisp: 0.7, mem: 0.8, heavy: 0.05}},
	{"7f2d8c5a-0e3b-4a4c-9f7b-2c3d4e5f6071", "batch", "etl-x2k9q", "spark",
		"c3e4051627384950a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a1b2", 0.20,
		profile{fe: 0.12, bs: 0.08, ret: 0.45, fetchLat: 0.4, brMisp: 0.9, mem: 0.3, heavy: 0.2}},
}

// system is what runs outside the pods (kubelet, the runtime).
var system = profile{fe: 0.25, bs: 0.05, ret: 0.30, fetchLat: 0.7, brMisp: 0.6, mem: 0.5, heavy: 0.1}

var events = []string{"CPU_CLK_UNHALTED.THREAD", "CPU_CLK_UNHALTED.THREAD_ANY", "INST_RETIRED.ANY",
	"IDQ_UOPS_NOT_DELIVERED.CORE", "IDQ_UOPS_NOT_DELIVERED.CYCLES_0_UOPS_DELIV.CORE", "UOPS_ISSUED.ANY",
	"UOPS_RETIRED.RETIRE_SLOTS", "UOPS_RETIRED.MACRO_FUSED", "INT_MISC.RECOVERY_CYCLES", "INT_MISC.RECOVERY_CYCLES_ANY",
	"BR_MISP_RETIRED.ALL_BRANCHES", "MACHINE_CLEARS.COUNT", "CYCLE_ACTIVITY.STALLS_MEM_ANY", "CYCLE_ACTIVITY.STALLS_TOTAL",
	"EXE_ACTIVITY.1_PORTS_UTIL", "EXE_ACTIVITY.2_PORTS_UTIL", "EXE_ACTIVITY.BOUND_ON_STORES",
	// level 3's (--collector.topdown.level=3)
	"ICACHE_16B.IFDATA_STALL", "ICACHE_16B.IFDATA_STALL:c1:e1", "ICACHE_TAG.STALLS", "INT_MISC.CLEAR_RESTEER_CYCLES",
	"BACLEARS.ANY", "IDQ.MS_SWITCHES", "DECODE.LCP", "DSB2MITE_SWITCHES.PENALTY_CYCLES", "IDQ.ALL_MITE_CYCLES_ANY_UOPS",
	"IDQ.ALL_MITE_CYCLES_4_UOPS", "IDQ.DSB_CYCLES_ANY", "IDQ.DSB_CYCLES_OK", "INT_MISC.CLEARS_COUNT",
	"MACHINE_CLEARS.MEMORY_ORDERING", "CYCLE_ACTIVITY.STALLS_L1D_MISS", "CYCLE_ACTIVITY.STALLS_L2_MISS",
	"CYCLE_ACTIVITY.STALLS_L3_MISS", "MEM_LOAD_RETIRED.L2_HIT", "MEM_LOAD_RETIRED.FB_HIT", "MEM_LOAD_RETIRED.L1_MISS",
	"L1D_PEND_MISS.FB_FULL:c1", "ARITH.DIVIDER_ACTIVE", "PARTIAL_RAT_STALLS.SCOREBOARD", "EXE_ACTIVITY.EXE_BOUND_0_PORTS",
	"UOPS_EXECUTED.THREAD", "UOPS_EXECUTED.X87", "FP_ARITH_INST_RETIRED.SCALAR", "FP_ARITH_INST_RETIRED.VECTOR",
	"MEM_INST_RETIRED.ANY", "BR_INST_RETIRED.ALL_BRANCHES", "IDQ.MS_UOPS"}

// cgroupEvents are the events a cgroup's levels 1 and 2 need; the file
// keeps cgroups to them to stay small (level 3 is node-wide).
var cgroupEvents = events[:17]

// counts inverts skx's formulas for cycles c running profile p.
func counts(c float64, p profile) map[string]float64 {
	s := 4 * c
	be := 1 - p.fe - p.bs - p.ret
	rs := p.ret * s
	rec := p.bs * s / 8 // recovery slots are half of bad speculation
	mf := 0.1 * rs
	clears := p.bs * s / 40
	d := 0.4*c + 0.1*c + p.ret*0.1*c + 0.05*c // memory_bound's denominator
	out := map[string]float64{
		"CPU_CLK_UNHALTED.THREAD": c, "CPU_CLK_UNHALTED.THREAD_ANY": c,
		"INST_RETIRED.ANY":            rs + mf - p.heavy*rs,
		"IDQ_UOPS_NOT_DELIVERED.CORE": p.fe * s, "IDQ_UOPS_NOT_DELIVERED.CYCLES_0_UOPS_DELIV.CORE": p.fetchLat * p.fe * s / 4,
		"UOPS_ISSUED.ANY": rs + p.bs*s - 4*rec, "UOPS_RETIRED.RETIRE_SLOTS": rs, "UOPS_RETIRED.MACRO_FUSED": mf,
		"INT_MISC.RECOVERY_CYCLES": rec, "INT_MISC.RECOVERY_CYCLES_ANY": rec,
		"BR_MISP_RETIRED.ALL_BRANCHES": p.brMisp * clears, "MACHINE_CLEARS.COUNT": (1 - p.brMisp) * clears,
		"CYCLE_ACTIVITY.STALLS_MEM_ANY": p.mem*d - 0.05*c, "CYCLE_ACTIVITY.STALLS_TOTAL": 0.4 * c,
		"EXE_ACTIVITY.1_PORTS_UTIL": 0.1 * c, "EXE_ACTIVITY.2_PORTS_UTIL": 0.1 * c,
		"EXE_ACTIVITY.BOUND_ON_STORES": 0.05 * c,
		"_be":                          be,
	}
	level3(out, c, p)
	return out
}

// level3 adds the events of skx's level 3 (node-level only: the cgroups
// keep to levels 1 and 2), in fixed shares of the level-2 quantities they split:
// Intel's level-3 nodes are estimates, not a partition, so the shares
// only need to look like a workload.
func level3(e map[string]float64, c float64, p profile) {
	fl := p.fetchLat * p.fe * c // cycles with no uop delivered
	fb := (1 - p.fetchLat) * p.fe
	e["ICACHE_16B.IFDATA_STALL"], e["ICACHE_16B.IFDATA_STALL:c1:e1"] = 0.3*fl, 0.01*fl
	e["ICACHE_TAG.STALLS"], e["INT_MISC.CLEAR_RESTEER_CYCLES"], e["BACLEARS.ANY"] = 0.1*fl, 0.2*fl, 0.005*fl
	e["IDQ.MS_SWITCHES"], e["DECODE.LCP"], e["DSB2MITE_SWITCHES.PENALTY_CYCLES"] = 0.02*fl, 0.02*fl, 0.1*fl
	e["IDQ.ALL_MITE_CYCLES_ANY_UOPS"], e["IDQ.ALL_MITE_CYCLES_4_UOPS"] = 0.9*c, (0.9-1.2*fb)*c
	e["IDQ.DSB_CYCLES_ANY"], e["IDQ.DSB_CYCLES_OK"] = 0.8*c, (0.8-0.8*fb)*c
	misp, mc := e["BR_MISP_RETIRED.ALL_BRANCHES"], e["MACHINE_CLEARS.COUNT"]
	e["INT_MISC.CLEARS_COUNT"], e["MACHINE_CLEARS.MEMORY_ORDERING"] = mc+misp/0.9, 0.7*mc
	mem := e["CYCLE_ACTIVITY.STALLS_MEM_ANY"]
	e["CYCLE_ACTIVITY.STALLS_L1D_MISS"], e["CYCLE_ACTIVITY.STALLS_L2_MISS"], e["CYCLE_ACTIVITY.STALLS_L3_MISS"] = 0.6*mem, 0.4*mem, 0.25*mem
	e["MEM_LOAD_RETIRED.L2_HIT"], e["MEM_LOAD_RETIRED.FB_HIT"], e["MEM_LOAD_RETIRED.L1_MISS"] = 1e-3*c, 2e-4*c, 2e-3*c
	e["L1D_PEND_MISS.FB_FULL:c1"] = 1e-3 * c
	e["ARITH.DIVIDER_ACTIVE"], e["PARTIAL_RAT_STALLS.SCOREBOARD"], e["EXE_ACTIVITY.EXE_BOUND_0_PORTS"] = 0.02*c, 0.01*c, 0.05*c
	rs, inst := e["UOPS_RETIRED.RETIRE_SLOTS"], e["INST_RETIRED.ANY"]
	e["UOPS_EXECUTED.THREAD"], e["UOPS_EXECUTED.X87"] = 1.1*rs, 1e-3*rs
	e["FP_ARITH_INST_RETIRED.SCALAR"], e["FP_ARITH_INST_RETIRED.VECTOR"] = 0.05*rs, 0.02*rs
	e["MEM_INST_RETIRED.ANY"], e["BR_INST_RETIRED.ALL_BRANCHES"] = 0.35*inst, 0.2*inst
	// microcode_sequencer: half of heavy operations.
	e["IDQ.MS_UOPS"] = 0.5 * p.heavy * p.ret * 4 * c * e["UOPS_ISSUED.ANY"] / rs
}

func main() {
	w := os.Stdout
	fmt.Fprintln(w, "# Synthetic, not recorded on any hardware: generated by `go run ./internal/examplegen/skx` from the repository root.")
	fmt.Fprintln(w, "# Shaped like `perf stat -x, -I 2000 -A -a --for-each-cgroup ...` on a 2-CPU Skylake-SP (skx)")
	fmt.Fprintln(w, "# node, SMT off, with three pods; counts derive from chosen Top-Down fractions through skx's")
	fmt.Fprintln(w, "# formulas (levels 1 and 2 per cgroup; level 3's node-wide, in fixed shares). The etl pod's bad speculation rises to 35% in")
	fmt.Fprintln(w, "# intervals 9-14. Replay with (--collector.topdown.level=3 for level 3):")
	fmt.Fprintln(w, "#   pmu_exporter --source=replay --replay.file=examples/replay/skx-synthetic.csv --replay.uarch=skx")
	for _, p := range pods {
		fmt.Fprintf(w, "# pod %s %s %s %s=%s\n", p.uid, p.ns, p.name, p.id, p.container)
	}
	for i := 1; i <= intervals; i++ {
		t := float64(i)*seconds + 0.000731*float64(i%3)
		for cpu := 0; cpu < cpus; cpu++ {
			cycles := hz * seconds * (0.85 + 0.1*math.Sin(float64(i+cpu)/3))
			node := map[string]float64{}
			used := 0.0
			var lines []string
			for _, p := range pods {
				prof := p.prof
				if p.name == "etl-x2k9q" && i >= 9 && i <= 14 {
					prof.bs, prof.ret = 0.35, 0.18
				}
				c := cycles * p.busy * (1 + 0.2*math.Cos(float64(i*(cpu+1))/4))
				used += c
				cc := counts(c, prof)
				for _, e := range events {
					node[e] += cc[e]
				}
				slice := fmt.Sprintf("kubepods/burstable/pod%s", p.uid)
				for _, cg := range []string{slice, slice + "/" + p.id} {
					for _, e := range cgroupEvents {
						lines = append(lines, fmt.Sprintf("%17.9f,CPU%d,%.0f,,%s,%s,%.0f,100.00,,", t, cpu, cc[e], e, cg, seconds*1e9))
					}
					// The software clock every host counts, PMU or not: the
					// pod's CPU time, its cycles at the nominal clock.
					lines = append(lines, fmt.Sprintf("%17.9f,CPU%d,%.2f,msec,task-clock,%s,%.0f,100.00,,", t, cpu, c/hz*1e3, cg, seconds*1e9))
				}
			}
			sys := counts(cycles-used, system)
			for _, e := range events {
				node[e] += sys[e]
				fmt.Fprintf(w, "%17.9f,CPU%d,%.0f,,%s,%.0f,50.00,,\n", t, cpu, node[e], e, seconds*1e9/2)
			}
			for _, l := range lines {
				fmt.Fprintln(w, l)
			}
		}
	}
}
