package exporter

import (
	"cmp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pmu-exporter/pmu_exporter/plan/platform"
)

// PlatformSource reads the platform PMUs' counters (kernel/platformcount).
type PlatformSource interface {
	Read(fn func(c *platform.Counter, cpu int, count uint64)) error
}

// Platform exports the node's platform counters as counters, for PromQL to
// make the ratios: energy in joules by package and domain (RAPL), the
// free-running MSRs by CPU (tsc, aperf, mperf…: busy share is
// rate(mperf)/rate(tsc), the effective frequency while busy
// rate(tsc)·rate(aperf)/rate(mperf)), and C-state residency in TSC cycles
// by core and by package.
type Platform struct {
	src       PlatformSource
	packageOf func(cpu int) string
	energy    *prometheus.Desc
	msr       *prometheus.Desc
	coreC     *prometheus.Desc
	pkgC      *prometheus.Desc
	memory    *prometheus.Desc
	llcMiss   *prometheus.Desc
	upi       *prometheus.Desc
	dram      *prometheus.Desc
	xgmi      *prometheus.Desc
	mcReqs    *prometheus.Desc
	mcRetries *prometheus.Desc
	peak      *prometheus.Desc
	peakValue float64 // bytes/s, 0: none given
	errors    *prometheus.Desc
	readErrs  atomic.Uint64 // scrapes may collect at once
	onRead    func(took time.Duration, err error)
}

// WithRead calls fn after each read of the counters (at a scrape), with
// how long it took and what failed: the collector's health.
func (p *Platform) WithRead(fn func(took time.Duration, err error)) *Platform {
	p.onRead = fn
	return p
}

// NewPlatform exports src; packageOf names a CPU's package (its
// physical_package_id).
func NewPlatform(src PlatformSource, packageOf func(cpu int) string) *Platform {
	return &Platform{src: src, packageOf: packageOf,
		energy:    desc("node_energy_joules_total", "Energy the package consumed since the exporter started, by domain (pkg: the package, cores, ram: its DRAM, psys: the platform, gpu), as the power PMU counts it (RAPL, read on the CPU its cpumask names; the count times events/energy-*.scale). Power is its rate.", "package", "domain"),
		msr:       desc("node_msr_total", "The msr PMU's free-running counters on each CPU since the exporter started: tsc (the time-stamp counter), aperf and mperf (actual and reference cycles while not halted), pperf, smi, irperf, as perf's msr PMU names them. Busy share: rate(mperf)/rate(tsc); effective frequency while busy: rate(tsc)*rate(aperf)/rate(mperf).", "cpu", "msr"),
		coreC:     desc("node_core_cstate_residency_cycles_total", "TSC cycles the core spent in a C-state (the cstate_core PMU, read on the CPU its cpumask names for the core); its rate over the TSC's is the residency share.", "cpu", "state"),
		pkgC:      desc("node_package_cstate_residency_cycles_total", "TSC cycles the package spent in a package C-state (the cstate_pkg PMU).", "package", "state"),
		memory:    desc("node_memory_bytes_total", "Bytes the package's memory controllers read from and wrote to DRAM (direction), summed over its controllers: their CAS commands × 64 bytes (Intel uncore_imc_* cas_count_read and _write, AMD amd_umc_* umc_cas_cmd.rd and .wr), as perf's memory_bandwidth_* and umc_mem_*_bandwidth metrics count them; on NXP i.MX 8M parts the DDR controller's read and write cycles × 16 (8M Mini, Quad) or × 8 (Nano), or its AXI filter's bytes (Plus), as perf's imx8m*_ddr_{read,write}.all count them. Bandwidth is its rate.", "package", "direction"),
		llcMiss:   desc("node_llc_miss_memory_bytes_total", "Bytes the package's LLC misses read from and wrote to memory (direction), local to the package or remote (locality), summed over its LLC slices: Intel's UNC_CHA_REQUESTS.{READS,WRITES}_{LOCAL,REMOTE} × 64 bytes, as its llc_miss_*_memory_bandwidth_* metrics count them: the NUMA traffic.", "package", "direction", "locality"),
		upi:       desc("node_upi_bytes_total", "Data bytes a UPI link between packages sent (direction transmit) or received (receive), by the package it belongs to and its link number: its data flits × 64/9 bytes (Intel's UNC_UPI_TxL_FLITS.ALL_DATA and RxL, as its upi_data_transmit_bw and _receive_bw count them). The cross-socket traffic; its rate is the link's bandwidth.", "package", "link", "direction"),
		dram:      desc("node_dram_bytes_total", "Bytes the package's DRAM read (direction read) and wrote (write) for a processor of this package (requester local) or of another (remote), summed over its data fabric's DRAM channels, 64 bytes a data beat: AMD Zen 4's amd_df {local,remote}_processor_{read,write}_data_beats_cs0 to cs11, as perf's dram_*_data_for_*_processor metrics count them; Zen 5's {local,remote}_socket_write_data_beats_dram_0 to 11 and, for reads, which Zen 5 does not split by requester, local_or_remote_socket_read_data_beats_dram_0 to 11 (requester local_or_remote), as its dram_*_bandwidth_for_*_socket metrics count them. Scaled where the data fabric's counters take turns. The memory's view of NUMA traffic (pmu_node_llc_miss_memory_bytes_total is Intel's requester view).", "package", "direction", "requester"),
		xgmi:      desc("node_xgmi_bytes_total", "Data bytes an AMD xGMI link between packages sent (direction transmit) or received (receive), by the package it belongs to and its link number, 64 bytes a data beat: Zen 4's amd_df local_socket_outbound_data_beats_link0 to link7 (sent only), as perf's local_socket_outbound_data_from_all_links counts them; Zen 5's local_socket_{outbound,inbound}_data_beats_link_0 to 5, as its cross_socket_*_data_bandwidth_for_local_socket count them. Scaled where the data fabric's counters take turns. The cross-socket traffic (pmu_node_upi_bytes_total is Intel's).", "package", "link", "direction"),
		mcReqs:    desc("node_memory_controller_requests_total", "Requests the package's Arm CMN mesh sent from its home nodes (HN-F) to its memory controllers, summed over the mesh: hnf_mc_reqs. Requests, not bytes: perf publishes no formula that turns them into bytes. Retried requests are counted again when re-sent (pmu_node_memory_controller_retries_total).", "package"),
		mcRetries: desc("node_memory_controller_retries_total", "Requests to the package's memory controllers that the controllers asked the Arm CMN's home nodes to retry: hnf_mc_retries. Its rate over that of pmu_node_memory_controller_requests_total is perf's mc_message_retry_rate, which says whether the memory controller is the bottleneck.", "package"),
		peak:      desc("node_memory_peak_bytes_per_second", "Each package's peak memory bandwidth, as the operator gave it (--collector.platform.memory-peak); absent where none was given."),
		errors:    desc("node_read_errors_total", "Reads of the platform counters that failed (a CPU that went offline).")}
}

// WithMemoryPeak exports each package's peak memory bandwidth, bytes/s
// (0: none).
func (p *Platform) WithMemoryPeak(bytesPerSecond float64) *Platform {
	p.peakValue = bytesPerSecond
	return p
}

// Describe implements prometheus.Collector.
func (p *Platform) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.energy, p.msr, p.coreC, p.pkgC, p.memory, p.llcMiss, p.upi, p.dram, p.xgmi, p.mcReqs, p.mcRetries, p.peak, p.errors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *Platform) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	type pkgDir struct{ pkg, dir, locality string }
	memory := map[pkgDir]float64{}   // a package's controllers, summed
	llcMiss := map[pkgDir]float64{}  // and its LLC slices
	upi := map[pkgDir]float64{}      // a link of a package: locality holds the link
	dram := map[pkgDir]float64{}     // a package's coherent stations, by requester
	xgmi := map[pkgDir]float64{}     // a link of a package: locality holds the link
	requests := map[pkgDir]float64{} // a package's CMN, by outcome (dir)
	err := p.src.Read(func(c *platform.Counter, cpu int, count uint64) {
		switch c.Kind {
		case platform.Energy:
			ch <- prometheus.MustNewConstMetric(p.energy, prometheus.CounterValue, float64(count)*c.Scale, p.packageOf(cpu), c.Name)
		case platform.MSR:
			ch <- prometheus.MustNewConstMetric(p.msr, prometheus.CounterValue, float64(count), strconv.Itoa(cpu), c.Name)
		case platform.CoreCState:
			ch <- prometheus.MustNewConstMetric(p.coreC, prometheus.CounterValue, float64(count), strconv.Itoa(cpu), c.Name)
		case platform.PackageCState:
			ch <- prometheus.MustNewConstMetric(p.pkgC, prometheus.CounterValue, float64(count), p.packageOf(cpu), c.Name)
		case platform.MemoryBytes:
			memory[pkgDir{p.packageOf(cpu), c.Name, ""}] += float64(count) * c.Scale
		case platform.LLCMissBytes:
			llcMiss[pkgDir{p.packageOf(cpu), c.Name, c.Locality}] += float64(count) * c.Scale
		case platform.XGMIBytes:
			xgmi[pkgDir{p.packageOf(cpu), c.Name, c.Link}] += float64(count) * c.Scale
		case platform.DRAMBytes:
			dram[pkgDir{p.packageOf(cpu), c.Name, c.Locality}] += float64(count) * c.Scale
		case platform.UPIBytes:
			upi[pkgDir{p.packageOf(cpu), c.Name, cmp.Or(c.Link, "all")}] += float64(count) * c.Scale
		case platform.MemoryRequests:
			requests[pkgDir{p.packageOf(cpu), c.Name, ""}] += float64(count) * c.Scale
		}
	})
	for k, v := range memory {
		ch <- prometheus.MustNewConstMetric(p.memory, prometheus.CounterValue, v, k.pkg, k.dir)
	}
	for k, v := range llcMiss {
		ch <- prometheus.MustNewConstMetric(p.llcMiss, prometheus.CounterValue, v, k.pkg, k.dir, k.locality)
	}
	for k, v := range xgmi {
		ch <- prometheus.MustNewConstMetric(p.xgmi, prometheus.CounterValue, v, k.pkg, k.locality, k.dir)
	}
	for k, v := range dram {
		ch <- prometheus.MustNewConstMetric(p.dram, prometheus.CounterValue, v, k.pkg, k.dir, k.locality)
	}
	for k, v := range upi {
		ch <- prometheus.MustNewConstMetric(p.upi, prometheus.CounterValue, v, k.pkg, k.locality, k.dir)
	}
	for k, v := range requests {
		d := p.mcReqs
		if k.dir == "retried" {
			d = p.mcRetries
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, k.pkg)
	}
	if p.peakValue > 0 && len(memory) > 0 {
		ch <- prometheus.MustNewConstMetric(p.peak, prometheus.GaugeValue, p.peakValue)
	}
	if err != nil {
		p.readErrs.Add(1)
	}
	if p.onRead != nil {
		p.onRead(time.Since(start), err)
	}
	ch <- prometheus.MustNewConstMetric(p.errors, prometheus.CounterValue, float64(p.readErrs.Load()))
}
