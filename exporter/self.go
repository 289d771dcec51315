package exporter

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
)

// SelfCost exports what the exporter costs the node and adds to what it
// measures (Zapanuks et al.; notes §2.4 rule 4): its CPU time (and, where
// the PMU counts them, instructions and cycles) per read cycle, counted on
// the reading thread, and per scrape; the cost of one group read
// (null-read calibration); and what each read adds to a CPU's counts.
type SelfCost struct {
	mu                         sync.Mutex
	reads, scrapes             uint64
	readNs, scrapeNs           uint64
	instructions, cycles       uint64
	hasInstructions, hasCycles bool
	null                       *validate.Spread
	perturbation               map[string]float64
	cpu, count, instr, cyc     *prometheus.Desc
	nullRead, perRead          *prometheus.Desc
}

// NewSelfCost starts with nothing measured.
func NewSelfCost() *SelfCost {
	return &SelfCost{perturbation: map[string]float64{},
		cpu:      desc("self_cpu_seconds_total", "The exporter's own CPU time by activity: read (its read cycles, counted with task-clock on the reading thread: the reads, Top-Down and per-cgroup steps) and scrape (the process's CPU time while a scrape was served, other work at the same time included).", "activity"),
		count:    desc("self_activities_total", "Read cycles and scrapes done: the denominators of pmu_self_cpu_seconds_total per activity.", "activity"),
		instr:    desc("self_instructions_total", "Instructions the exporter's reading thread retired in its read cycles (where the PMU counts them).", "activity"),
		cyc:      desc("self_cycles_total", "Cycles the exporter's reading thread ran in its read cycles (where the PMU counts them).", "activity"),
		nullRead: desc("self_null_read_seconds", "What one read(2) of a counter group costs: back-to-back reads of a group like the exporter's on one CPU, at start (statistic: median, min, iqr).", "statistic"),
		perRead:  desc("self_read_perturbation", "What one more read adds to the event's count on the CPU the reader runs on: counts over the same window with reads at the counting interval and at ten times it, the difference per extra read (serve --validate.on-start).", "event"),
	}
}

// AddRead adds a read cycle's cost.
func (s *SelfCost) AddRead(cpuNs, instructions, cycles uint64, hasInstructions, hasCycles bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	s.readNs += cpuNs
	s.instructions += instructions
	s.cycles += cycles
	s.hasInstructions, s.hasCycles = hasInstructions, hasCycles
}

// AddScrape adds a scrape's cost.
func (s *SelfCost) AddScrape(cpuNs uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrapes++
	s.scrapeNs += cpuNs
}

// SetNullReads records the null-read calibration.
func (s *SelfCost) SetNullReads(sp validate.Spread) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.null = &sp
}

// SetPerturbation records what one extra read adds to event's count.
func (s *SelfCost) SetPerturbation(event string, perRead float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perturbation[event] = perRead
}

// Describe implements prometheus.Collector.
func (s *SelfCost) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.cpu, s.count, s.instr, s.cyc, s.nullRead, s.perRead} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *SelfCost) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(s.cpu, prometheus.CounterValue, float64(s.readNs)/1e9, "read")
	ch <- prometheus.MustNewConstMetric(s.cpu, prometheus.CounterValue, float64(s.scrapeNs)/1e9, "scrape")
	ch <- prometheus.MustNewConstMetric(s.count, prometheus.CounterValue, float64(s.reads), "read")
	ch <- prometheus.MustNewConstMetric(s.count, prometheus.CounterValue, float64(s.scrapes), "scrape")
	if s.hasInstructions {
		ch <- prometheus.MustNewConstMetric(s.instr, prometheus.CounterValue, float64(s.instructions), "read")
	}
	if s.hasCycles {
		ch <- prometheus.MustNewConstMetric(s.cyc, prometheus.CounterValue, float64(s.cycles), "read")
	}
	if s.null != nil {
		ch <- prometheus.MustNewConstMetric(s.nullRead, prometheus.GaugeValue, s.null.Median.Seconds(), "median")
		ch <- prometheus.MustNewConstMetric(s.nullRead, prometheus.GaugeValue, s.null.Min.Seconds(), "min")
		ch <- prometheus.MustNewConstMetric(s.nullRead, prometheus.GaugeValue, s.null.IQR.Seconds(), "iqr")
	}
	for ev, v := range s.perturbation {
		ch <- prometheus.MustNewConstMetric(s.perRead, prometheus.GaugeValue, v, ev)
	}
}
