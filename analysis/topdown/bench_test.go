package topdown

import (
	"strconv"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// prunedTree is the built-in tree of uarch cut to level, and compiled.
func prunedTree(b *testing.B, uarch string, level int) (*metric.Definition, *metric.Tree) {
	b.Helper()
	d, err := Builtin(uarch)
	if err != nil {
		b.Fatal(err)
	}
	cut, err := d.Prune(level, nil)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := cut.Compile()
	if err != nil {
		b.Fatal(err)
	}
	return cut, tr
}

// BenchmarkEvaluate256CPUs computes every metric of a tree to a level (2,
// the default, 3, and 6: Intel's deepest) for 256 CPUs, one evaluator per CPU as the live
// collector keeps them: one op is one interval of a 256-CPU host.
func BenchmarkEvaluate256CPUs(b *testing.B) {
	for _, c := range []struct {
		uarch string
		level int
	}{{"skx", 2}, {"spr", 2}, {"zen4", 2}, {"skx", 3}, {"spr", 3}, {"skx", 6}, {"spr", 6}} {
		b.Run(c.uarch+"/level"+string(rune('0'+c.level)), func(b *testing.B) {
			_, tr := prunedTree(b, c.uarch, c.level)
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

// BenchmarkLiveUpdate256CPUs is one interval of live Top-Down on a 256-CPU
// host, at level 2, 3 and 6: every group's counts read, the tree evaluated per
// CPU, and at level 3 each node whose events lie in a later group evaluated
// again on that group's counts (its home).
func BenchmarkLiveUpdate256CPUs(b *testing.B) {
	for _, c := range []struct {
		uarch string
		level int
	}{{"skx", 2}, {"skx", 3}, {"spr", 3}, {"skx", 6}, {"spr", 6}} {
		b.Run(c.uarch+"/level"+string(rune('0'+c.level)), func(b *testing.B) {
			cut, tr := prunedTree(b, c.uarch, c.level)
			var groups []eventspec.Group
			snap := model.Snapshot{}
			for i, g := range cut.Groups {
				eg := eventspec.Group{Name: strconv.Itoa(i)}
				gt := model.GroupTotals{Name: eg.Name, RunningNS: map[int]uint64{}}
				for _, e := range g {
					eg.Events = append(eg.Events, eventspec.Event{Name: e})
					snap.Events = append(snap.Events, model.EventTotals{Group: eg.Name, Event: e, PerCPU: map[int]uint64{}})
				}
				groups = append(groups, eg)
				snap.Groups = append(snap.Groups, gt)
			}
			params := map[string]float64{"smt_on": 0}
			SetTSC(params, 2.1e9)
			live := NewLive(tr, groups, params)
			step := func(n uint64) {
				for _, e := range snap.Events {
					for cpu := range 256 {
						e.PerCPU[cpu] = n * uint64(1000+cpu+len(e.Event))
					}
				}
				for _, g := range snap.Groups {
					for cpu := range 256 {
						g.RunningNS[cpu] = n * 1000
					}
				}
				live.Update(snap)
			}
			step(1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step(uint64(i + 2))
			}
		})
	}
}
