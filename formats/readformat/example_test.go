package readformat_test

import (
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/formats/readformat"
)

// Two reads of a multiplexed group of cycles and instructions: in the
// second interval the group held the counters for 250 of its 1,000 ns, so
// each count of that interval is scaled by 4, as perf stat scales.
func ExampleAccumulator() {
	a := readformat.New(2)
	a.Add(readformat.Reading{Enabled: 1000, Running: 1000, Values: []uint64{5000, 4000}})
	a.Add(readformat.Reading{Enabled: 2000, Running: 1250, Values: []uint64{6000, 5000}})
	fmt.Println("totals:", a.Totals)
	fmt.Printf("ran %d of %d ns\n", a.RunningNS, a.EnabledNS)
	// Output:
	// totals: [9000 8000]
	// ran 1250 of 2000 ns
}
