package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
)

// CommSource is the address sampler's state: ComDetective's detector and
// the decoder's outcome counts, held still while f runs, and the
// communication folded to last-level cache domains.
type CommSource interface {
	View(f func(det *comdetect.Detector, out memop.Outcomes))
	Domains(f func(a, b string, c comdetect.Cell))
}

// CommCollector exports communication between threads, node-wide, and what
// the address sampler could and could not resolve.
type CommCollector struct {
	src                          CommSource
	outcomes, detections, volume *prometheus.Desc
	widths                       *prometheus.Desc
	window, domains, period      *prometheus.Desc
	cacheBytes, cacheEvicted     *prometheus.Desc
	symbolBytes, symbolsRefused  *prometheus.Desc
	readsTimedOut                *prometheus.Desc
	// The volumes, one unit each: sampled CPU seconds where the address
	// sampler decodes timer samples (source decode), estimated accesses
	// where a precise PMU samples.
	volSeconds, volAccesses, domSeconds, domAccesses *prometheus.Desc
	periods                                          func() map[string]uint64 // the samplers' periods in ns by target cgroup (nil: not exported)
	source                                           string                   // the sampler whose accesses the detections come from
	watch                                            *Watch                   // nil: no watchpoints

	stats                 *samplestat.Stats // per-cgroup sharing (nil: none)
	cgroups               CgroupIDs
	names                 PodNames
	cgVolume              *prometheus.Desc
	cgSeconds, cgAccesses *prometheus.Desc
}

// NewComm exports src.
func NewComm(src CommSource) *CommCollector {
	return &CommCollector{src: src, source: "decode",
		outcomes: desc("address_samples_total",
			"Timer samples of the address sampler by outcome: resolved from the instruction at the sampled IP (at_ip) or the one before it (before_ip), or why no address (no_memory_operand, segment_relative, gather, string_instruction, undecodable, unreadable_code, kernel, jit, no_registers, ambiguous: a jump or an indirect branch lands at the IP, so the code before it may not have run).", "outcome"),
		widths: desc("comm_access_widths_total",
			"Precise memory samples the detector took (source pebs, ibs or spe) by whether their access width, which the records lack, came from the instruction at their IP (decoded) or not (unknown: one byte, so an overlap can be missed and true sharing seen as false).", "outcome"),
		detections: desc("comm_detections_total",
			"ComDetective detections: a sampled access of one thread to a cache line another thread's sampled store published, by kind (true_sharing: overlapping bytes; false_sharing: not), and the sampler whose accesses found it (source=decode: timer samples resolved from their registers; pebs, ibs, spe: precise memory samples). Raw counts behind pmu_comm_volume_total.", "kind", "source"),
		volume: desc("comm_volume_total",
			"Deprecated, kept for one release (CHANGELOG.md): pmu_comm_sampled_seconds_total and pmu_comm_accesses_estimated_total, one unit each. Communication between threads estimated from the detections, by kind: the sum of the detecting samples' periods (source=decode: nanoseconds of sampled CPU time, so a share of time, not of accesses; pebs, ibs, spe: accesses).", "kind", "source"),
		cacheBytes: desc("address_decode_cache_bytes",
			"Memory the address decoder keeps of the sampled instructions it decoded and their functions' decoding passes, as it estimates it; bounded by --collector.comm.decode-cache (per decoder: the address sampler's, and ReuseTracker's where it runs)."),
		cacheEvicted: desc("address_decode_cache_evicted_total",
			"Decoded instructions the address decoder dropped for its memory bound, those not sampled since the cache last turned over; one sampled again is decoded again. A fast rise means the bound is below the node's working set of sampled code."),
		symbolBytes: desc("address_symbol_cache_bytes",
			"Memory the address decoder keeps of the sampled binaries' symbol tables, DWARF line tables and Go pclntabs, as it estimates it; bounded by --collector.comm.symbol-cache."),
		symbolsRefused: desc("address_symbol_tables_refused_total",
			"Symbol, line and pclntab tables the address decoder left unread because reading them would pass --collector.comm.symbol-cache (a binary may declare a table of any size); the binary's code is decoded without them, from the sampled IP on."),
		readsTimedOut: desc("address_code_reads_timed_out_total",
			"Reads of sampled code, maps and binaries the address decoder gave up on for not returning within a second (a file on a stalled FUSE or NFS mount): the sample ends as unreadable_code, that file is not read again, and past 16 such reads held in the kernel at once no code is read until they return."),
		window: desc("comm_window_samples",
			"How many of a reader's own samples a published store stays fresh for."),
		period: desc("comm_sample_period_seconds",
			"CPU time between two of the address sampler's samples on a CPU, as its governor set it (cpu-clock's period), per sampler: by the cgroup it samples (one per --collector.comm.cgroup or annotated pod; cgroup=\"\" for the sampler of every task).", "cgroup"),
		volSeconds: desc("comm_sampled_seconds_total",
			"Communication between threads estimated from the address sampler's detections (timer samples resolved from their registers), by kind: the CPU time the detecting samples stand for, the sum of their periods.", "kind"),
		volAccesses: desc("comm_accesses_estimated_total",
			"Communication between threads estimated from the detections of precise memory samples, by kind and source (pebs, ibs, spe): the accesses the detecting samples stand for, the sum of their periods.", "kind", "source"),
		domSeconds: desc("comm_domain_sampled_seconds_total",
			"As pmu_comm_sampled_seconds_total, between threads on CPUs of two last-level cache domains (domain_a <= domain_b, equal for CPUs sharing one).", "domain_a", "domain_b", "kind"),
		domAccesses: desc("comm_domain_accesses_estimated_total",
			"As pmu_comm_accesses_estimated_total, between threads on CPUs of two last-level cache domains (domain_a <= domain_b, equal for CPUs sharing one).", "domain_a", "domain_b", "kind"),
		domains: desc("comm_domain_volume_total",
			"Deprecated, kept for one release (CHANGELOG.md): pmu_comm_domain_sampled_seconds_total and pmu_comm_domain_accesses_estimated_total, one unit each. Communication between threads on CPUs of two last-level cache domains (named by the cache's level and sysfs id, e.g. L3#0, or by its CPU list where sysfs gives no id; domain_a <= domain_b, equal for CPUs sharing one), by kind: the CPU × CPU matrix folded so that series grow with domains², not CPUs².", "domain_a", "domain_b", "kind"),
	}
}

// WatchStats are the watchpoints' totals: traps read, of which
// undecodable and recorded as communication (the trap path) or handed to
// ReuseTracker (Reuse); traps lost, arms; the threads watched by each.
type WatchStats struct {
	Traps, Unresolved, Lost, Arms, Recorded, Reuse uint64
	Threads, ReuseThreads                          int
	// Joined: threads given their events at their first sample.
	Joined uint64
	// The watch budget's (Limited false: none): its budget (a share of the
	// targets' CPU time), a trap's measured cost (s), the targets' CPU
	// time while watched (s), what their traps cost them (s), and the
	// samples it kept from arming.
	Limited                     bool
	Budget, TrapCost, CPU, Cost float64
	Denied                      uint64
}

// WithWatch exports the trap path's totals.
func (c *CommCollector) WithWatch(f func() WatchStats) *CommCollector {
	c.watch = NewWatch(f)
	return c
}

// Watch exports the watchpoints' totals (pmu_comm_watchpoint_*,
// pmu_comm_watched_threads): beside the communication live, alone where a
// replay's trace harness armed simulated registers.
type Watch struct {
	stats                               func() WatchStats
	traps, arms, watchedThreads, joined *prometheus.Desc
	budget, trapCost, targetCPU         *prometheus.Desc
	trapCPU, denied                     *prometheus.Desc
}

// NewWatch exports the totals f reads.
func NewWatch(f func() WatchStats) *Watch {
	return &Watch{stats: f,
		traps: desc("comm_watchpoint_traps_total",
			"Watchpoint traps read, by outcome: on ComDetective's trap path recorded (its access, decoded from the trapping instruction, counted as communication with the line's publisher), ignored (it came after its thread was armed elsewhere), undecodable; reuse (handed to ReuseTracker: a reuse, an invalidation or stale, pmu_reuse_*); lost (the kernel's ring was full).", "outcome"),
		arms:           desc("comm_watchpoint_arms_total", "Watchpoints armed by sampled accesses (both algorithms); each traps once at most, at the first matching access (the kernel then disables it)."),
		watchedThreads: desc("comm_watched_threads", "Threads with watchpoint events open, by what their registers serve (use: watchpoints, ComDetective's trap path; reuse, ReuseTracker).", "use"),
		joined:         desc("comm_watched_threads_joined_total", "Threads of watched processes given watchpoint events at their first sample, before the second's reading of their cgroup's threads found them (short-lived threads)."),
		budget:         desc("comm_watchpoint_budget_ratio", "The share of a watched process's CPU time its watchpoint traps may cost it (--collector.comm.watch-budget)."),
		trapCost:       desc("comm_watchpoint_trap_cost_seconds", "What one trap costs the trapping thread, measured at start on the exporter's own thread (CPU time of stores watched minus unwatched, per store)."),
		targetCPU:      desc("comm_watchpoint_target_cpu_seconds_total", "CPU time the watched processes ran while watched."),
		trapCPU:        desc("comm_watchpoint_trap_cpu_seconds_total", "CPU time the watched processes' traps cost them (traps × the measured cost); divided by pmu_comm_watchpoint_target_cpu_seconds_total it stays within the budget."),
		denied:         desc("comm_watchpoint_arms_denied_total", "Sampled accesses used without watchpoints because their process's traps had spent its budget."),
	}
}

// Describe implements prometheus.Collector.
func (c *Watch) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.traps, c.arms, c.watchedThreads, c.joined, c.budget, c.trapCost, c.targetCPU, c.trapCPU, c.denied} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; the watch budget's families
// only where one limits the traps (WatchStats.Limited).
func (c *Watch) Collect(ch chan<- prometheus.Metric) {
	w := c.stats()
	ch <- prometheus.MustNewConstMetric(c.traps, prometheus.CounterValue, float64(w.Recorded), "recorded")
	ch <- prometheus.MustNewConstMetric(c.traps, prometheus.CounterValue, float64(w.Traps-w.Unresolved-w.Recorded-w.Reuse), "ignored")
	ch <- prometheus.MustNewConstMetric(c.traps, prometheus.CounterValue, float64(w.Unresolved), "undecodable")
	ch <- prometheus.MustNewConstMetric(c.traps, prometheus.CounterValue, float64(w.Reuse), "reuse")
	ch <- prometheus.MustNewConstMetric(c.traps, prometheus.CounterValue, float64(w.Lost), "lost")
	ch <- prometheus.MustNewConstMetric(c.arms, prometheus.CounterValue, float64(w.Arms))
	ch <- prometheus.MustNewConstMetric(c.watchedThreads, prometheus.GaugeValue, float64(w.Threads), "watchpoints")
	ch <- prometheus.MustNewConstMetric(c.watchedThreads, prometheus.GaugeValue, float64(w.ReuseThreads), "reuse")
	ch <- prometheus.MustNewConstMetric(c.joined, prometheus.CounterValue, float64(w.Joined))
	if w.Limited {
		ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, w.Budget)
		ch <- prometheus.MustNewConstMetric(c.trapCost, prometheus.GaugeValue, w.TrapCost)
		ch <- prometheus.MustNewConstMetric(c.targetCPU, prometheus.CounterValue, w.CPU)
		ch <- prometheus.MustNewConstMetric(c.trapCPU, prometheus.CounterValue, w.Cost)
		ch <- prometheus.MustNewConstMetric(c.denied, prometheus.CounterValue, float64(w.Denied))
	}
}

// WithSource names the sampler the accesses come from: decode (the
// address sampler), pebs, ibs or spe.
func (c *CommCollector) WithSource(source string) *CommCollector {
	c.source = source
	return c
}

// WithPeriods exports the samplers' periods (ns), by the cgroup each
// samples ("": every task).
func (c *CommCollector) WithPeriods(f func() map[string]uint64) *CommCollector {
	c.periods = f
	return c
}

// PerCgroup adds the communication of each cgroup's threads (as readers)
// from stats' per-cgroup totals, the ids named by ids and pods by names.
func (c *CommCollector) PerCgroup(stats *samplestat.Stats, ids CgroupIDs, names PodNames) *CommCollector {
	c.stats, c.cgroups, c.names = stats, ids, names
	c.cgSeconds = desc("cgroup_comm_sampled_seconds_total",
		"As pmu_comm_sampled_seconds_total, for the cgroup's threads (as readers) with other threads of their process. cgroup=\"other\" holds the cgroups beyond the bound.", append(append([]string(nil), identityLabels[:]...), "kind")...)
	c.cgAccesses = desc("cgroup_comm_accesses_estimated_total",
		"As pmu_comm_accesses_estimated_total, for the cgroup's threads (as readers) with other threads of their process. cgroup=\"other\" holds the cgroups beyond the bound.", append(append([]string(nil), identityLabels[:]...), "kind")...)
	c.cgVolume = desc("cgroup_comm_volume_total",
		"Deprecated, kept for one release (CHANGELOG.md): pmu_cgroup_comm_sampled_seconds_total and pmu_cgroup_comm_accesses_estimated_total, one unit each. Communication of the cgroup's threads with other threads of their process (ComDetective detections of the address sampler, summed sampling periods: nanoseconds of sampled CPU time, or accesses where a precise PMU samples), by kind. cgroup=\"other\" holds the cgroups beyond the bound.", append(append([]string(nil), identityLabels[:]...), "kind")...)
	return c
}

// inUnit is a volume (summed sample periods) in its sampler's unit: the
// address sampler's nanoseconds as seconds, a precise sampler's periods
// as accesses, with the source where withSource.
func (c *CommCollector) inUnit(seconds, accesses *prometheus.Desc, volume float64, labels []string, withSource bool) prometheus.Metric {
	if c.source == "decode" {
		return prometheus.MustNewConstMetric(seconds, prometheus.CounterValue, volume/1e9, labels...)
	}
	if withSource {
		labels = append(labels[:len(labels):len(labels)], c.source)
	}
	return prometheus.MustNewConstMetric(accesses, prometheus.CounterValue, volume, labels...)
}

// Describe implements prometheus.Collector.
func (c *CommCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.source == "decode" {
		ch <- c.outcomes
	} else {
		ch <- c.widths
	}
	ch <- c.detections
	ch <- c.volume
	if c.source == "decode" {
		ch <- c.volSeconds
		ch <- c.domSeconds
	} else {
		ch <- c.volAccesses
		ch <- c.domAccesses
	}
	ch <- c.window
	ch <- c.cacheBytes
	ch <- c.cacheEvicted
	ch <- c.symbolBytes
	ch <- c.symbolsRefused
	ch <- c.readsTimedOut
	ch <- c.domains
	if c.periods != nil {
		ch <- c.period
	}
	if c.watch != nil {
		c.watch.Describe(ch)
	}
	if c.stats != nil {
		ch <- c.cgVolume
		if c.source == "decode" {
			ch <- c.cgSeconds
		} else {
			ch <- c.cgAccesses
		}
	}
}

// Collect implements prometheus.Collector.
func (c *CommCollector) Collect(ch chan<- prometheus.Metric) {
	c.src.View(func(det *comdetect.Detector, out memop.Outcomes) {
		if c.source == "decode" {
			ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(out.Resolved[0]), "at_ip")
			ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(out.Resolved[1]), "before_ip")
			for r, n := range out.Unresolved {
				if memop.Reason(r) != memop.Resolved {
					ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(n), memop.Reason(r).String())
				}
			}
		} else {
			ch <- prometheus.MustNewConstMetric(c.widths, prometheus.CounterValue, float64(out.Widths[1]), "decoded")
			ch <- prometheus.MustNewConstMetric(c.widths, prometheus.CounterValue, float64(out.Widths[0]), "unknown")
		}
		t := det.Totals()
		ch <- prometheus.MustNewConstMetric(c.detections, prometheus.CounterValue, float64(t.TrueCount), "true_sharing", c.source)
		ch <- prometheus.MustNewConstMetric(c.detections, prometheus.CounterValue, float64(t.FalseCount), "false_sharing", c.source)
		ch <- prometheus.MustNewConstMetric(c.volume, prometheus.CounterValue, float64(t.True), "true_sharing", c.source)
		ch <- prometheus.MustNewConstMetric(c.volume, prometheus.CounterValue, float64(t.False), "false_sharing", c.source)
		ch <- c.inUnit(c.volSeconds, c.volAccesses, float64(t.True), []string{"true_sharing"}, true)
		ch <- c.inUnit(c.volSeconds, c.volAccesses, float64(t.False), []string{"false_sharing"}, true)
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(det.Window()))
		ch <- prometheus.MustNewConstMetric(c.cacheBytes, prometheus.GaugeValue, float64(out.CacheBytes))
		ch <- prometheus.MustNewConstMetric(c.cacheEvicted, prometheus.CounterValue, float64(out.Evicted))
		ch <- prometheus.MustNewConstMetric(c.symbolBytes, prometheus.GaugeValue, float64(out.SymbolBytes))
		ch <- prometheus.MustNewConstMetric(c.symbolsRefused, prometheus.CounterValue, float64(out.SymbolsRefused))
		ch <- prometheus.MustNewConstMetric(c.readsTimedOut, prometheus.CounterValue, float64(out.ReadsTimedOut))
	})
	if c.periods != nil {
		for target, ns := range c.periods() {
			ch <- prometheus.MustNewConstMetric(c.period, prometheus.GaugeValue, float64(ns)/1e9, target)
		}
	}
	if c.watch != nil {
		c.watch.Collect(ch)
	}
	c.src.Domains(func(a, b string, cell comdetect.Cell) {
		ch <- prometheus.MustNewConstMetric(c.domains, prometheus.CounterValue, float64(cell.True), a, b, "true_sharing")
		ch <- prometheus.MustNewConstMetric(c.domains, prometheus.CounterValue, float64(cell.False), a, b, "false_sharing")
		ch <- c.inUnit(c.domSeconds, c.domAccesses, float64(cell.True), []string{a, b, "true_sharing"}, false)
		ch <- c.inUnit(c.domSeconds, c.domAccesses, float64(cell.False), []string{a, b, "false_sharing"}, false)
	})
	if c.stats == nil {
		return
	}
	s := Sampling{cgroups: c.cgroups, names: c.names}
	for id, cg := range c.stats.Snapshot().Cgroups {
		l := s.cgroupLabels(id)
		for _, k := range []cacheline.Kind{cacheline.TrueSharing, cacheline.FalseSharing} {
			labels := append(append([]string(nil), l...), k.String())
			ch <- prometheus.MustNewConstMetric(c.cgVolume, prometheus.CounterValue, float64(cg.Sharing[k]), labels...)
			ch <- c.inUnit(c.cgSeconds, c.cgAccesses, float64(cg.Sharing[k]), labels, false)
		}
	}
}
