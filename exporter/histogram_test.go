package exporter

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Observations 1, 3, 3, 100 and 0 at schema 3 (bucket i's upper bound is
// 2^(i/8)): 1 is bucket 0, 3 is bucket 13 (2^(12/8) = 2.83 < 3 ≤ 2^(13/8)
// = 3.08), 100 is bucket 54 (2^(53/8) = 98.7 < 100 ≤ 2^(54/8) = 107.6).
// Counted by hand at the powers of two: ≤1: 2 (the zero and the 1),
// ≤2: 2, ≤4: 4, ≤8 … ≤64: 4, ≤128: 5.
func TestClassicBucketsOfNative(t *testing.T) {
	desc := prometheus.NewDesc("x", "x", nil, nil)
	m := newNativeHistogram(desc, 5, 107, map[int]int64{0: 1, 13: 2, 54: 1}, 1, 3, time.Unix(0, 0))
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	h := out.GetHistogram()
	want := map[float64]uint64{1: 2, 2: 2, 4: 4, 8: 4, 16: 4, 32: 4, 64: 4, 128: 5}
	if len(h.GetBucket()) != len(want) {
		t.Fatalf("%d classic buckets: %v", len(h.GetBucket()), h.GetBucket())
	}
	for _, b := range h.GetBucket() {
		if want[b.GetUpperBound()] != b.GetCumulativeCount() {
			t.Errorf("le=%g: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want[b.GetUpperBound()])
		}
	}
	if h.GetSchema() != 3 || len(h.GetPositiveSpan()) == 0 || h.GetSampleCount() != 5 {
		t.Errorf("the native part is lost: %v", h)
	}
}
