package collector

import (
	"errors"
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kernel/platformcount"
	"github.com/pmu-exporter/pmu_exporter/plan/platform"
)

// platformEntry is the platform collector in the registry: it counts the
// platform PMUs (energy, MSRs, C-states, memory traffic); its flags
// (--collector.platform.*) bound to f, and its live and replay factories.
func platformEntry(f *Options) registry.Collector[*build] {
	return registry.Collector[*build]{Name: "platform", Default: true, Live: livePlatform, Replay: replayPlatform,
		Help: "Count the platform PMUs the host exposes, on the CPUs their cpumask names: energy by package and domain (power, RAPL), the free-running MSRs by CPU (msr: tsc, aperf, mperf for frequency and busy share), C-state residency (cstate_core, cstate_pkg), memory bandwidth (uncore_imc_*, amd_umc_*), NUMA and UPI traffic (uncore_cha_*, uncore_upi_*): pmu_node_*",
		Options: func(o registry.Options) {
			o.Flag("memory-peak", "", "Each package's peak memory bandwidth in bytes per second, where the operator knows it (channels × transfer rate × 8 bytes): exported as pmu_node_memory_peak_bytes_per_second for the dashboard to draw bandwidth against; 0 exports none, rather than a guess.", func(fc *kingpin.FlagClause) { flagrange.Float64(fc, &f.memoryPeak, "0", 0, 1e15) })
		}}
}

// livePlatform counts the platform PMUs the host has (energy, the MSRs,
// C-state residency: plan/platform), each on the CPUs its cpumask
// names, and exports them as pmu_node_*; check says which are missing
// and why (host/capability's energy, frequency and cstates).
func livePlatform(b *build) error {
	online, err := b.online.Read()
	if err != nil {
		return err
	}
	cs, err := platform.Select(b.s.pmus, online, b.s.facts.CPU.Family)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		b.log.Info("no platform PMU counters on this host", "see", "pmu_exporter check: energy, frequency, cstates")
		return registry.Unavailable("no platform PMU (power, msr, cstate_core, cstate_pkg) on this host")
	}
	c, err := platformcount.Open(cs)
	if c.Opened() == 0 {
		if err == nil {
			err = errors.New("no CPU to open them on")
		}
		// Nothing to read is not a collector that works: it fails
		// (pmu_collector_success 0), and says why.
		b.log.Warn("platform counters: none opened", "counters", len(cs), "err", err)
		return fmt.Errorf("none of %d platform counters opened: %w", len(cs), err)
	}
	if err != nil {
		b.log.Warn("some platform counters did not open", "err", err)
	}
	b.log.Info("platform counters", "counters", len(cs), "open_counter_cpus", c.Opened())
	b.p.closers = append(b.p.closers, c.Close)
	b.p.add("platform", exporter.NewPlatform(c, host.PackageOf(b.f.sysfs)).WithRead(func(took time.Duration, err error) {
		b.p.health.Observe("platform", took, err)
	}).WithMemoryPeak(b.f.memoryPeak))
	return nil
}

// replayPlatform serves the recording's platform events (perf stat -I of
// power/, msr/, cstate_*/, uncore_imc/, uncore_cha/ or amd_umc/ events)
// as the live pmu_node_* families, besides the counted events.
func replayPlatform(b *build) error {
	if b.replay.rec == nil {
		return fmt.Errorf("%w: no recording", errNotRecorded)
	}
	events, err := b.replay.rec.PlatformEvents()
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("%w: no platform PMU events in the recording", errNotRecorded)
	}
	b.log.Info("replay: platform events", "events", events)
	b.replay.platform = true
	return nil
}
