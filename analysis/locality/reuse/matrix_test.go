package reuse

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMatrix runs the whole matrix of docs/sampling.md (scripts/reuse-matrix):
// RIBench's five shapes at the thesis' distances (SCALES=16: 1 Ki to 16 Ki)
// or short ones (1: 64 to 1 Ki), with and without invalidations, 1, 2 and
// 8 threads, ≥ 5 M accesses a run, 5 seeds, at the CLI's default period and
// 4× the samples (PERIODS overrides; POL=reservoir, patient or eager:
// another replacement than Keeper): a line per setting with each seed's S by this estimator
// (AJ) and by Horvitz–Thompson's weights (HT), the not resolved share
// (nr) and the invalidated share against the trace's; then the means.
func TestMatrix(t *testing.T) {
	if os.Getenv("PMU_EXPORTER_REUSE_MATRIX") == "" {
		t.Skip("the whole matrix: scripts/reuse-matrix")
	}
	periods := []uint64{1000, 250}
	if p := os.Getenv("PERIODS"); p != "" {
		periods = nil
		for _, f := range strings.Split(p, ",") {
			v, _ := strconv.ParseUint(f, 10, 64)
			periods = append(periods, v)
		}
	}
	pol := map[string]Replacement{"keeper": Keeper, "reservoir": Reservoir, "patient": Patient, "eager": Eager}[os.Getenv("POL")]
	n := uint64(5e6)
	sumA, sumH, cnt := map[uint64]float64{}, map[uint64]float64{}, map[uint64]float64{}
	defer func() {
		for p := range cnt {
			fmt.Printf("MEAN p%d AJ %.3f HT %.3f\n", p, sumA[p]/cnt[p], sumH[p]/cnt[p])
		}
	}()
	var scales []uint64
	for _, f := range strings.Split(os.Getenv("SCALES"), ",") {
		v, _ := strconv.ParseUint(f, 10, 64)
		scales = append(scales, v)
	}
	for _, scale := range scales {
		for _, inval := range []float64{0, 0.3} {
			for _, threads := range []int{1, 2, 8} {
				for _, base := range Cases {
					c := base.Scaled(scale)
					c.Invalidate = inval
					c.Outer = c.OuterFor(threads, n)
					for _, period := range periods {
						var line string
						var sa, sh float64
						for seed := uint64(1); seed <= 5; seed++ {
							r := NewReplay(ReplayOptions{Options: Options{Seed: seed, Replacement: pol}, Period: period, Unsampled: Remote})
							truth := c.Generate(threads, seed*7, r.Access)
							r.Finish()
							tr := r.Tracker
							e := tr.Estimate()
							bins, nr := e.Fractions()
							saj := Accuracy(truth.Fractions(), bins)
							sht := Accuracy(truth.Fractions(), Normalized(tr.HT.Distance[:]))
							trueInv := float64(truth.Invalidated) / float64(truth.Accesses)
							sa += saj
							sh += sht
							line += fmt.Sprintf(" | AJ %.3f HT %.3f nr %.3f inv %.3f/%.3f", saj, sht, nr, e.Invalidated.Share, trueInv)
						}
						fmt.Printf("%-22s inv%.1f t%d p%4d%s\n", c.Name, inval, threads, period, line)
						sumA[period] += sa
						sumH[period] += sh
						cnt[period] += 5
					}
				}
			}
		}
	}
}
