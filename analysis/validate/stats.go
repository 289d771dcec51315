package validate

import (
	"math"
	"slices"
	"time"

	"github.com/pmu-exporter/pmu_exporter/formats/readformat"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Spread is a calibration's summary: median, minimum and inter-quartile
// range (the null-read cost of Zapanuks et al., reported as they did).
type Spread struct {
	Median, Min, IQR time.Duration
	N                int
}

// Summarize is the spread of ds (quartiles by the nearest rank).
func Summarize(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1)+0.5)] }
	return Spread{Median: at(0.5), Min: s[0], IQR: at(0.75) - at(0.25), N: len(s)}
}

// MultiplexError is the relative error multiplexing costs an event (notes
// §2.4, Mytkowicz): each multiplexed copy's count scaled by enabled/running
// (readformat.Scale, as the exporter scales) against the count of a pinned
// copy of the same event over the same window; the mean of the copies'
// relative differences, and the largest in magnitude. ok is false where
// no copy ran or the pinned copy counted nothing.
func MultiplexError(pinned uint64, copies []model.Reading) (mean, worst float64, ok bool) {
	n := 0
	for _, c := range copies {
		if c.Running == 0 || pinned == 0 {
			continue
		}
		d := (float64(readformat.Scale(c.Count, c.Enabled, c.Running)) - float64(pinned)) / float64(pinned)
		mean += d
		if math.Abs(d) > math.Abs(worst) {
			worst = d
		}
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	return mean / float64(n), worst, true
}
