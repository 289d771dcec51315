package topdown_test

import (
	"fmt"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
	"github.com/pmu-exporter/pmu_exporter/formats/perfstat"
)

// Level 1 of Skylake's tree over one interval of perf stat -x, output, SMT
// off: 1,000 cycles are 4,000 slots; 800 of them undelivered by the front
// end (0.2); 2,400 µops issued, 2,000 retired and 50 recovery cycles (200
// slots) make bad speculation (2,400 − 2,000 + 200) / 4,000 = 0.15;
// retiring is 2,000 / 4,000 = 0.5; the back end has the rest, 0.15.
func ExampleOffline() {
	def, err := topdown.Builtin("skx")
	if err != nil {
		fmt.Println(err)
		return
	}
	tree, err := def.Compile()
	if err != nil {
		fmt.Println(err)
		return
	}
	const interval = `1000,,CPU_CLK_UNHALTED.THREAD,1000000,100.00,,
2000,,CPU_CLK_UNHALTED.THREAD_ANY,1000000,100.00,,
800,,IDQ_UOPS_NOT_DELIVERED.CORE,1000000,100.00,,
2400,,UOPS_ISSUED.ANY,1000000,100.00,,
2000,,UOPS_RETIRED.RETIRE_SLOTS,1000000,100.00,,
50,,INT_MISC.RECOVERY_CYCLES,1000000,100.00,,
100,,INT_MISC.RECOVERY_CYCLES_ANY,1000000,100.00,,
`
	samples, err := perfstat.Parse(strings.NewReader(interval))
	if err != nil {
		fmt.Println(err)
		return
	}
	intervals, _ := topdown.Offline(tree, samples, map[string]float64{"smt_on": 0})
	for _, m := range []string{"frontend_bound", "bad_speculation", "retiring", "backend_bound"} {
		fmt.Printf("%s %.2f\n", m, intervals[0].Metrics[m])
	}
	// Output:
	// frontend_bound 0.20
	// bad_speculation 0.15
	// retiring 0.50
	// backend_bound 0.15
}
