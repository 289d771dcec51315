package exporter

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Scraped serves families scraped from another exporter, the recording
// host's: a replay's stand-in for what only a live exporter makes (its own
// eBPF programs' cost). A counter rises from its first scrape's value at
// the rate between the first and the last scrape, so that rate() gives
// the recording host's rate and the counter never goes down; a gauge holds
// the last scrape's value.
type Scraped struct {
	series []scrapedSeries
	start  time.Time
	now    func() time.Time
}

type scrapedSeries struct {
	desc      *prometheus.Desc
	kind      prometheus.ValueType
	labels    []string
	value     float64 // the first scrape's (counter) or the last's (gauge)
	perSecond float64 // a counter's rise between the scrapes
}

// NewScraped serves families from two scrapes span apart: first and last
// by name, counters and gauges only. A series of the last scrape missing
// from the first, a counter that went down, or a family of another type
// is an error naming it; now is the clock (the counters start rising
// when NewScraped is called).
func NewScraped(first, last map[string]*dto.MetricFamily, span time.Duration, now func() time.Time) (*Scraped, error) {
	if span <= 0 {
		return nil, fmt.Errorf("the scrapes are %v apart: want a later one last", span)
	}
	r := &Scraped{start: now(), now: now}
	names := make([]string, 0, len(last))
	for name := range last {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fam := last[name]
		short, ok := strings.CutPrefix(name, namespace+"_")
		if !ok {
			return nil, fmt.Errorf("%s: not one of this exporter's families (%s_*)", name, namespace)
		}
		kind, ok := map[dto.MetricType]prometheus.ValueType{dto.MetricType_COUNTER: prometheus.CounterValue, dto.MetricType_GAUGE: prometheus.GaugeValue}[fam.GetType()]
		if !ok {
			return nil, fmt.Errorf("%s: a %v, want a counter or a gauge", name, fam.GetType())
		}
		before := map[string]float64{}
		for _, m := range first[name].GetMetric() {
			before[labelKey(m)] = value(m)
		}
		var d *prometheus.Desc
		var labelNames []string
		for _, m := range fam.GetMetric() {
			var names, values []string
			for _, lp := range m.GetLabel() {
				names, values = append(names, lp.GetName()), append(values, lp.GetValue())
			}
			if d == nil {
				d, labelNames = desc(short, fam.GetHelp(), names...), names
			} else if fmt.Sprint(names) != fmt.Sprint(labelNames) {
				return nil, fmt.Errorf("%s: labels %v beside %v", name, names, labelNames)
			}
			s := scrapedSeries{desc: d, kind: kind, labels: values, value: value(m)}
			if kind == prometheus.CounterValue {
				was, ok := before[labelKey(m)]
				switch {
				case !ok:
					return nil, fmt.Errorf("%s%v: in the last scrape, not the first", name, values)
				case was > s.value:
					return nil, fmt.Errorf("%s%v: the counter went down from %v to %v", name, values, was, s.value)
				}
				s.value, s.perSecond = was, (s.value-was)/span.Seconds()
			}
			r.series = append(r.series, s)
		}
	}
	return r, nil
}

func labelKey(m *dto.Metric) string {
	var k string
	for _, lp := range m.GetLabel() {
		k += lp.GetName() + "\x00" + lp.GetValue() + "\x00"
	}
	return k
}

func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// Describe sends nothing: an unchecked collector, because the families it
// serves are those other collectors of the exporter describe (the cgroup
// collector's, which a replay's recorded attribution leaves unsent).
func (r *Scraped) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (r *Scraped) Collect(ch chan<- prometheus.Metric) {
	elapsed := r.now().Sub(r.start).Seconds()
	for _, s := range r.series {
		v := s.value
		if s.kind == prometheus.CounterValue {
			v += s.perSecond * max(elapsed, 0)
		}
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, v, s.labels...)
	}
}
