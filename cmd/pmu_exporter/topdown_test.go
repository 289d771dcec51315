package main

import (
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
)

// Intel's trees carry toplev's thresholds and the AMD and Arm trees none,
// where the summary says so instead of flagging (their definitions: the
// threshold lines of analysis/topdown/defs).
func TestTreesWithThresholds(t *testing.T) {
	for uarch, want := range map[string]bool{"spr": true, "skx": true, "icx": true, "grt": true, "zen4": false, "zen5": false, "neoverse-n2": false} {
		def, err := topdown.Builtin(uarch)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := def.Compile()
		if err != nil {
			t.Fatal(err)
		}
		if got := hasThresholds(tree); got != want {
			t.Errorf("%s: thresholds %v, want %v", uarch, got, want)
		}
	}
}
