package validate

import (
	"slices"
	"time"
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
