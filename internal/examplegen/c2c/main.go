// Command c2c writes examples/replay/skx-c2c.data: a made-up `perf c2c record` of the thesis'
// False-Sharing benchmark on a Skylake-SP node (4 threads, 70% of their
// atomic adds on their own slots of one heap line, the rest on a shared
// counter; loads hit modified lines in L3, stores hit L1), in exact
// perf.data layout. `pmu_exporter c2c -i skx-c2c.data` reports the line, and
// `serve --source=replay --replay.samples=skx-c2c.data` serves its memory
// metrics. Run from the repository root: go run ./internal/examplegen/c2c > examples/replay/skx-c2c.data
package main

import (
	"os"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

func main() {
	c := perffile.C2C{F: 0.7, Threads: 4, Iters: 20000, Period: 50, PID: 4242, Heap: 0x5555_0000_0000, Seed: 1,
		LoadSrc:  datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode(),
		StoreSrc: datasrc.DataSrc{Op: datasrc.OpStore, Lvl: datasrc.LvlHit | datasrc.LvlL1, LvlNum: datasrc.LvlNumL1, Snoop: datasrc.SnoopNA}.Encode()}
	os.Stdout.Write(c.File())
}
