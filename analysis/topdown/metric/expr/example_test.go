package expr_test

import (
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric/expr"
)

// A formula is compiled once against the slots of its inputs and evaluated
// every interval without allocating.
func ExampleCompile() {
	slots := map[string]int{"UOPS_RETIRED.RETIRE_SLOTS": 0, "CPU_CLK_UNHALTED.THREAD": 1}
	prog, err := expr.Compile("UOPS_RETIRED.RETIRE_SLOTS / (4 * CPU_CLK_UNHALTED.THREAD)", func(name string) (int, bool) {
		s, ok := slots[name]
		return s, ok
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	stack := make([]float64, prog.StackSize())
	fmt.Println(prog.Names, prog.Eval([]float64{3e9, 1e9}, stack))
	// Output: [UOPS_RETIRED.RETIRE_SLOTS CPU_CLK_UNHALTED.THREAD] 0.75
}
