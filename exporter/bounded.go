package exporter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bounded serves a collector's metrics within a time bound: a scrape never
// waits on a collector whose Collect is held up (its source's lock held by a
// read that hangs in the kernel), so /metrics answers whatever one
// collector does. Past the bound, or while its earlier Collect still runs,
// the scrape gets the collector's latest complete set of metrics, counted
// in pmu_scrape_stale_total{part}: a counter then repeats its last value,
// never one lower. One Collect at most runs at a time, so a collector that
// never returns holds one goroutine, not one per scrape.
type Bounded struct {
	inner   prometheus.Collector
	part    string
	timeout time.Duration
	stale   *StaleScrapes

	mu      sync.Mutex
	last    []prometheus.Metric // the latest complete Collect's
	running chan struct{}       // closed when the running Collect ends; nil when none runs
}

// NewBounded bounds inner's Collect by timeout; part names it in stale's
// counter (a fixed word per collector: a bounded label).
func NewBounded(inner prometheus.Collector, part string, timeout time.Duration, stale *StaleScrapes) *Bounded {
	stale.add(part)
	return &Bounded{inner: inner, part: part, timeout: timeout, stale: stale}
}

// Describe is inner's: descriptors are given once, at registration.
func (b *Bounded) Describe(ch chan<- *prometheus.Desc) { b.inner.Describe(ch) }

// Collect runs inner's Collect (unless one runs already) and sends what it
// gave if it ends within the bound, else the latest complete set.
func (b *Bounded) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	running := b.running
	if running == nil {
		running = make(chan struct{})
		b.running = running
		go b.collect(running)
	}
	b.mu.Unlock()
	timer := time.NewTimer(b.timeout)
	defer timer.Stop()
	select {
	case <-running:
	case <-timer.C:
		b.stale.inc(b.part)
	}
	b.mu.Lock()
	last := b.last
	b.mu.Unlock()
	for _, m := range last {
		ch <- m
	}
}

// collect gathers one complete Collect of inner into last, then closes
// done.
func (b *Bounded) collect(done chan struct{}) {
	got := make(chan prometheus.Metric, 1024)
	var ms []prometheus.Metric
	drained := make(chan struct{})
	go func() {
		for m := range got {
			ms = append(ms, m)
		}
		close(drained)
	}()
	b.inner.Collect(got)
	close(got)
	<-drained
	b.mu.Lock()
	b.last, b.running = ms, nil
	b.mu.Unlock()
	close(done)
}

// StaleScrapes counts the scrapes that served a collector's earlier
// metrics because its Collect did not end within the bound.
type StaleScrapes struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	n    map[string]uint64
}

// NewStaleScrapes is the pmu_scrape_stale_total family, with every part
// added by NewBounded exported from 0.
func NewStaleScrapes() *StaleScrapes {
	return &StaleScrapes{n: map[string]uint64{},
		desc: desc("scrape_stale_total", "Scrapes that served this part of the exporter's metrics as an earlier scrape had them (none before its first complete one), because collecting it took longer than --web.collect-timeout: a read stuck in the kernel or a source's lock held. A part stuck for good also fails /-/healthy once its cycle has run past --collector.cycle-timeout.", "part")}
}

func (s *StaleScrapes) add(part string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.n[part]; !ok {
		s.n[part] = 0
	}
}

func (s *StaleScrapes) inc(part string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[part]++
}

// Describe sends the family's descriptor.
func (s *StaleScrapes) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect sends each part's count.
func (s *StaleScrapes) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for part, n := range s.n {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(n), part)
	}
}
