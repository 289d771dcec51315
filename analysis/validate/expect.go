package validate

// Expectation is what an event should count on a loop.
type Expectation struct {
	Loop string // instruction-loop, branch (the seven), fresh-pages, pipe-round-trips, spin, watched-writes
	// Slope is the count per unit of the loop's size (not for branch).
	Slope float64
	// Category is a branch event's (Loop branch).
	Category Category
	// Linear: the slope is not known in advance (cycles: it depends on
	// the clock and the core); the count must be linear in the size.
	Linear bool
	// Cache is the level a miss event of the pointer chase misses in:
	// L1d, L2 or LLC (Loop pointer-chase).
	Cache string
}

// Expected is what the events of the built-in profile and Top-Down trees
// (and perf's generic names) should count, by event name. An event not
// here has no loop that knows its count.
var Expected = map[string]Expectation{}

func expect(e Expectation, names ...string) {
	for _, n := range names {
		Expected[n] = e
	}
}

func init() {
	// Retired instructions: the loop is 1 + 3·n.
	expect(Expectation{Loop: "instruction-loop", Slope: 3},
		"instructions", "INST_RETIRED.ANY", "INST_RETIRED.ANY_P", "inst_retired", "ex_ret_instr")
	// Cycles: linear in the loop's length, at a rate the core sets.
	expect(Expectation{Loop: "instruction-loop", Linear: true},
		"cycles", "CPU_CLK_UNHALTED.THREAD", "CPU_CLK_UNHALTED.CORE", "CPU_CLK_UNHALTED.THREAD_P", "cpu_cycles", "ls_not_halted_cyc")
	expect(Expectation{Loop: "branch", Category: All},
		"branches", "BR_INST_RETIRED.ALL_BRANCHES", "ex_ret_brn", "br_retired")
	expect(Expectation{Loop: "branch", Category: M},
		"branch-misses", "BR_MISP_RETIRED.ALL_BRANCHES", "ex_ret_brn_misp", "br_mis_pred_retired", "br_mis_pred")
	expect(Expectation{Loop: "branch", Category: CR},
		"BR_INST_RETIRED.CONDITIONAL", "BR_INST_RETIRED.COND")
	expect(Expectation{Loop: "branch", Category: T},
		"BR_INST_RETIRED.COND_TAKEN", "BR_INST_RETIRED.CONDITIONAL_TAKEN")
	expect(Expectation{Loop: "branch", Category: CE},
		"BR_INST_EXEC.ALL_CONDITIONAL", "BR_INST_EXEC.ALL_BRANCHES")
	// Misses per step of a pointer chase, at the cache they miss in.
	expect(Expectation{Loop: "pointer-chase", Cache: "L1d"}, "L1-dcache-load-misses")
	expect(Expectation{Loop: "pointer-chase", Cache: "LLC"}, "LLC-load-misses", "cache-misses")
	// Software events, which every host counts.
	expect(Expectation{Loop: "fresh-pages", Slope: 1}, "page-faults", "faults", "minor-faults")
	expect(Expectation{Loop: "fresh-pages", Slope: 0}, "major-faults") // anonymous memory never needs the disk
	expect(Expectation{Loop: "pipe-round-trips", Slope: 1}, "context-switches", "cs")
	expect(Expectation{Loop: "spin", Slope: 1}, "task-clock", "cpu-clock")
	expect(Expectation{Loop: "spin", Slope: 0}, "cpu-migrations", "migrations") // the thread is bound to its CPU
	expect(Expectation{Loop: "watched-writes", Slope: 1}, "breakpoint")
}
