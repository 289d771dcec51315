package reuse_test

import (
	"fmt"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
)

// A thread walks four 8-byte slots round and round, so every reuse is 4 of
// its own accesses after the use: whichever accesses the sampler picks
// (one in about 8, seeded), the watchpoint armed on each traps at its next
// access, and every observed reuse lands in bin 2, the distances 4 to 7.
func ExampleReplay() {
	var trace strings.Builder
	for i := range 400 {
		fmt.Fprintf(&trace, "1 R 0x%x 8\n", 0x1000+8*(i%4))
	}
	r := reuse.NewReplay(reuse.ReplayOptions{Options: reuse.Options{Mode: reuse.Private, Slots: 4, Seed: 1, Clock: reuse.ClockAccesses}, Period: 8})
	if err := r.Run(strings.NewReader(trace.String())); err != nil {
		fmt.Println(err)
		return
	}
	raw := r.Tracker.Raw()
	fmt.Printf("observed reuses by log2 bin: only bin %d holds them: %v\n", len(raw)-1, raw[len(raw)-1] == r.Tracker.Reuses && r.Tracker.Reuses > 0)
	// Output:
	// observed reuses by log2 bin: only bin 2 holds them: true
}
