package topdown

import (
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
)

// BenchmarkEvaluate256CPUs computes every level 1 and 2 metric of a tree for 256
// CPUs, one evaluator per CPU as the live collector keeps them: one op is one
// interval of a 256-CPU host.
func BenchmarkEvaluate256CPUs(b *testing.B) {
	for _, uarch := range []string{"skx", "spr", "zen4"} {
		b.Run(uarch, func(b *testing.B) {
			d, _ := Builtin(uarch)
			tr, err := d.Compile()
			if err != nil {
				b.Fatal(err)
			}
			evs := make([]*metric.Evaluator, 256)
			for i := range evs {
				evs[i] = tr.NewEvaluator()
				for j, name := range tr.Inputs {
					evs[i].Set(tr.Input(name), float64(1000+i*7+j*13))
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, e := range evs {
					e.Eval()
				}
			}
		})
	}
}
