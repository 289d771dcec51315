// Command reusematrix runs the whole matrix of docs/sampling.md (scripts/reuse-matrix):
// RIBench's five shapes at the thesis' distances (SCALES=16: 1 Ki to 16 Ki)
// or short ones (1: 64 to 1 Ki), with and without invalidations, 1, 2 and
// 8 threads (THREADS overrides), ≥ 5 M accesses a run, 5 seeds, at the
// CLI's default period and 4× the samples (PERIODS overrides). Each trace
// runs three trackers: the default (OWN own slots, DefaultOwn unless told;
// POL another replacement: keeper, reservoir, patient or eager), all four
// slots global as before own slots (G: Keeper and this estimator), and
// the thesis' (HT: Reservoir, Horvitz–Thompson's weights). A line per
// setting with each seed's S by each, the default's not resolved share (nr)
// and its invalidated share against the trace's; then the means. LATE=1
// has the invalidating stores anywhere in the reuse interval
// (Case.StoreLate), not right after the use.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
)

func main() {
	periods := envList("PERIODS", []int{1000, 250})
	threadCounts := envList("THREADS", []int{1, 2, 8})
	scales := envList("SCALES", []int{16})
	pol := map[string]reuse.Replacement{"": reuse.Auto, "keeper": reuse.Keeper, "reservoir": reuse.Reservoir, "patient": reuse.Patient, "eager": reuse.Eager}[os.Getenv("POL")]
	own := reuse.DefaultOwn
	if v := os.Getenv("OWN"); v != "" {
		own, _ = strconv.Atoi(v)
	}
	const n = 5e6
	var sums [3]map[int]float64
	for i := range sums {
		sums[i] = map[int]float64{}
	}
	cnt := map[int]float64{}
	defer func() {
		for _, p := range periods {
			fmt.Printf("MEAN p%d AJ %.3f G %.3f HT %.3f\n", p, sums[0][p]/cnt[p], sums[1][p]/cnt[p], sums[2][p]/cnt[p])
		}
	}()
	for _, scale := range scales {
		for _, inval := range []float64{0, 0.3} {
			for _, threads := range threadCounts {
				for _, base := range reuse.Cases {
					c := base.Scaled(uint64(scale))
					c.Invalidate = inval
					c.StoreLate = os.Getenv("LATE") == "1"
					c.Outer = c.OuterFor(threads, n)
					for _, period := range periods {
						var line string
						for seed := uint64(1); seed <= 5; seed++ {
							run := func(o reuse.Options) (*reuse.Tracker, reuse.Truth) {
								o.Seed = seed
								r := reuse.NewReplay(reuse.ReplayOptions{Options: o, Period: uint64(period), Unsampled: reuse.Remote})
								truth := c.Generate(threads, seed*7, r.Access)
								r.Finish()
								return r.Tracker, truth
							}
							tr, truth := run(reuse.Options{Replacement: pol, Own: own})
							e := tr.Estimate()
							bins, nr := e.Fractions()
							saj := reuse.Accuracy(truth.Fractions(), bins)
							g, _ := run(reuse.Options{})
							ge := g.Estimate()
							gb, _ := ge.Fractions()
							sg := reuse.Accuracy(truth.Fractions(), gb)
							ht, _ := run(reuse.Options{Replacement: reuse.Reservoir})
							sht := reuse.Accuracy(truth.Fractions(), reuse.Normalized(ht.HT.Distance[:]))
							trueInv := float64(truth.Invalidated) / float64(truth.Accesses)
							for i, s := range []float64{saj, sg, sht} {
								sums[i][period] += s
							}
							cnt[period]++
							line += fmt.Sprintf(" | AJ %.3f G %.3f HT %.3f nr %.3f inv %.3f/%.3f", saj, sg, sht, nr, e.Invalidated.Share, trueInv)
						}
						fmt.Printf("%-22s inv%.1f t%d p%4d%s\n", c.Name, inval, threads, period, line)
					}
				}
			}
		}
	}
}

// envList is the environment variable's comma-separated integers, or def.
func envList(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			panic(fmt.Sprintf("%s: %q is not a number", name, f))
		}
		out = append(out, n)
	}
	return out
}
