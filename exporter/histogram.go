package exporter

import (
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// nativeWithClassic is a native histogram that also carries classic
// buckets, one per power of two, so that a Prometheus that does not ingest
// native histograms (and the text format, which has no native ones) still
// gets a usable distribution instead of the +Inf bucket alone.
type nativeWithClassic struct {
	prometheus.Metric
	classic []*dto.Bucket
}

func (m nativeWithClassic) Write(out *dto.Metric) error {
	if err := m.Metric.Write(out); err != nil {
		return err
	}
	out.Histogram.Bucket = m.classic
	return nil
}

// newNativeHistogram builds a native histogram of non-negative
// observations (buckets: index under schema → count; zero: the zero
// bucket) with classic buckets at the powers of two it spans.
func newNativeHistogram(desc *prometheus.Desc, count uint64, sum float64, buckets map[int]int64, zero uint64, schema int32, created time.Time, labels ...string) prometheus.Metric {
	h, err := prometheus.NewConstNativeHistogram(desc, count, sum, buckets, nil, zero, schema, 0, created, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return nativeWithClassic{Metric: h, classic: classicBuckets(buckets, zero, schema)}
}

// classicBuckets are cumulative counts at upper bounds 2^k: native bucket
// i (upper bound 2^(i/2^schema)) falls at or below 2^k when i ≤ k·2^schema,
// so every power of two is an exact native boundary (schema ≥ 0).
func classicBuckets(buckets map[int]int64, zero uint64, schema int32) []*dto.Bucket {
	per := 1 << max(schema, 0)
	idx := make([]int, 0, len(buckets))
	for i, n := range buckets {
		if n > 0 {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	out := []*dto.Bucket{}
	cum := zero
	if len(idx) == 0 {
		return out
	}
	lo := floorDiv(idx[0]-1, per) + 1 // the first power of two with counts at or below it
	hi := ceilDiv(idx[len(idx)-1], per)
	j := 0
	for k := lo; k <= hi; k++ {
		for j < len(idx) && idx[j] <= k*per {
			cum += uint64(buckets[idx[j]])
			j++
		}
		c, ub := cum, math.Ldexp(1, k)
		out = append(out, &dto.Bucket{CumulativeCount: &c, UpperBound: &ub})
	}
	return out
}

func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int) int { return -floorDiv(-a, b) }
