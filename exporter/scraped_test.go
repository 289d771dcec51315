package exporter

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func families(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// collected are a collector's values by family name (one series each).
func collected(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	out := map[string]float64{}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		n := name.FindStringSubmatch(m.Desc().String())[1]
		out[n] = d.GetCounter().GetValue() + d.GetGauge().GetValue()
	}
	return out
}

const (
	scrapeFirst = "# TYPE pmu_self_bpf_runs_total counter\npmu_self_bpf_runs_total{program=\"a\"} 100\n# TYPE pmu_self_bpf_stats_enabled gauge\npmu_self_bpf_stats_enabled 0\n"
	scrapeLast  = "# TYPE pmu_self_bpf_runs_total counter\npmu_self_bpf_runs_total{program=\"a\"} 500\n# TYPE pmu_self_bpf_stats_enabled gauge\npmu_self_bpf_stats_enabled 1\n"
)

// Two scrapes 20 s apart: the counter rose 400, so it is served from its
// first value at 20 a second (hand-computed: 100 at the start, 300 ten
// seconds on); the gauge is the last scrape's.
func TestScrapedCountersRiseAtTheirRate(t *testing.T) {
	now := time.Unix(1000, 0)
	s, err := NewScraped(families(t, scrapeFirst), families(t, scrapeLast), 20*time.Second, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after time.Duration
		runs  float64
	}{{0, 100}, {10 * time.Second, 300}} {
		now = time.Unix(1000, 0).Add(c.after)
		got := collected(t, s)
		if got["pmu_self_bpf_runs_total"] != c.runs || got["pmu_self_bpf_stats_enabled"] != 1 {
			t.Errorf("%v after the start: %v, want %v runs and the last scrape's gauge, 1", c.after, got, c.runs)
		}
	}
}

// What two scrapes cannot say is refused, naming the series.
func TestScrapedRefuses(t *testing.T) {
	now := func() time.Time { return time.Unix(1000, 0) }
	for name, c := range map[string]struct {
		first, last, want string
		span              time.Duration
	}{
		"went down":   {scrapeLast, scrapeFirst, "went down from 500 to 100", time.Second},
		"new series":  {"# TYPE pmu_self_bpf_runs_total counter\n", scrapeLast, `pmu_self_bpf_runs_total[a]: in the last scrape, not the first`, time.Second},
		"a histogram": {scrapeFirst, "# TYPE pmu_self_bpf_x histogram\npmu_self_bpf_x_bucket{le=\"+Inf\"} 1\npmu_self_bpf_x_sum 1\npmu_self_bpf_x_count 1\n", "pmu_self_bpf_x: a HISTOGRAM", time.Second},
		"no span":     {scrapeFirst, scrapeLast, "0s apart", 0},
		"not ours":    {"# TYPE node_x counter\nnode_x 1\n", "# TYPE node_x counter\nnode_x 2\n", "node_x: not one of this exporter's families", time.Second},
	} {
		_, err := NewScraped(families(t, c.first), families(t, c.last), c.span, now)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
