// Command spe writes examples/replay/n1-spe.data: a made-up `perf record -e
// arm_spe_0/ts_enable=1,pa_enable=1/` of the thesis' False-Sharing
// benchmark on a Neoverse N1 (4 threads on two clusters of two cores, 70%
// of their load-add-store increments on their own slots of one heap line,
// the rest on a shared counter; each load served by the L1, a peer core or
// the peer cluster, as the line's last writer says), in exact perf.data
// layout with the AUX data as SPE packets. Arm's data sources have no HITM:
// `pmu_exporter c2c n1-spe.data` ranks the lines by peer snoops, as `perf
// c2c report -d peer` does. Run from the repository root: go run ./internal/examplegen/spe > examples/replay/n1-spe.data
package main

import (
	"os"

	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

func main() {
	c := perffile.SPEC2C{F: 0.7, Threads: 4, Iters: 20000, Period: 50, PID: 4242, Seed: 1}
	os.Stdout.Write(c.File())
}
