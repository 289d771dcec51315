package comdetect_test

import (
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
)

// Four sampled accesses of two threads of process 7 to one cache line:
// thread 1 stores to bytes 0–7, thread 2 then loads bytes 8–15 (the same
// line, other bytes: false sharing), thread 1 stores bytes 0–7 again, and
// thread 2 loads bytes 0–7 (the same bytes: true sharing). Each sample
// stands for 1,000 accesses (its period).
func ExampleDetector() {
	d := comdetect.New(comdetect.Options{})
	const line = 0x7f0000001000
	for i, a := range []comdetect.Access{
		{Addr: line, Size: 8, PID: 7, TID: 1, CPU: 0, Store: true},
		{Addr: line + 8, Size: 8, PID: 7, TID: 2, CPU: 1},
		{Addr: line, Size: 8, PID: 7, TID: 1, CPU: 0, Store: true},
		{Addr: line, Size: 8, PID: 7, TID: 2, CPU: 1},
	} {
		a.Period, a.Time = 1000, uint64(i+1)
		fmt.Printf("access %d: %v\n", i+1, d.Add(&a).Kind)
	}
	m := d.Report(7, 1)[0]
	fmt.Printf("threads %v: true %d, false %d accesses (%d detections)\n",
		m.Threads, m.True[0][1], m.False[0][1], m.Totals.Detections)
	// Output:
	// access 1: none
	// access 2: false_sharing
	// access 3: none
	// access 4: true_sharing
	// threads [1 2]: true 1000, false 1000 accesses (2 detections)
}
