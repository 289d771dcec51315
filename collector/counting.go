package collector

import (
	"errors"
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
	"github.com/pmu-exporter/pmu_exporter/replay"
)

// countingEntry is the counting collector in the registry: it counts the
// configured and default events on every CPU; its flags
// (--collector.counting.*) bound to f, and its live and replay factories.
func countingEntry(f *Options) registry.Collector[*build] {
	return registry.Collector[*build]{Name: "counting", Required: true, Needs: []string{capability.SystemWide},
		Live: liveCounting, Replay: replayCounting,
		Help: "Count the configured and default events on every CPU",
		Options: func(o registry.Options) {
			o.Flag("per-cpu", "collector.per-cpu", "Add a cpu label to event and group series.",
				func(fc *kingpin.FlagClause) { fc.BoolVar(&f.perCPU) })
			o.Flag("interval", "collector.interval", "How often every group is read (per-cgroup attribution and Top-Down follow each read).",
				func(fc *kingpin.FlagClause) {
					flagrange.Duration(fc, &f.interval, "1s", 10*time.Millisecond, time.Hour)
				})
			o.Flag("info-events", "", "Also count the inputs of the Info metrics the default groups lack, where the host counts hardware events: loads, stores and their L1 data cache misses, last-level cache loads and misses (perf's generic cache events, each group alone), and the Top-Down tree's Info events (Intel: loads that missed L1, L2 and L3, MEM_LOAD_RETIRED.*_MISS; AMD Zen 4: L2 demand misses); the recording rules make MPKI at each level and CPI of them. Off by default: on a PMU with few counters they add multiplexing.",
				func(fc *kingpin.FlagClause) { fc.BoolVar(&f.infoEvents) })
			o.Flag("hotplug-uevents", "", "Follow CPU hotplug as the kernel announces it (uevents on a netlink socket): a CPU that comes online is counted and sampled from milliseconds after, not from the next read; off, hotplug is followed at each read only.",
				func(fc *kingpin.FlagClause) { fc.Default("true").BoolVar(&f.hotplugUevents) })
		}}
}

// liveCounting reports what the host allows and plans the counted groups;
// the engine itself starts once every collector has added its groups and
// hooks (startEngine).
func liveCounting(b *build) error {
	for _, feat := range b.s.report.Features {
		if feat.Available {
			b.log.Info("capability available", "feature", feat.Name, "detail", feat.Detail)
		} else {
			b.log.Warn("capability missing", "feature", feat.Name, "reason", feat.Reason, "fix", feat.Fix)
		}
	}
	for _, n := range b.s.report.Notes {
		b.log.Warn(n)
	}
	for _, e := range b.s.configErrors {
		b.log.Error("configuration problem; the group is not counted", "err", e)
	}
	return nil
}

// replayCounting loads the recording.
func replayCounting(b *build) error {
	f, logger := b.f, b.log
	if f.replay.file == "" {
		return errors.New("--source=replay needs --replay.file")
	}
	file, err := safeopen.Input("--replay.file", f.replay.file, safeopen.Recording, nil)
	if err != nil {
		return err
	}
	defer file.Close()
	rec, err := replay.Load(f.replay.file, file)
	if err != nil {
		return err
	}
	if f.perCPU && !rec.PerCPU {
		return fmt.Errorf("--collector.counting.per-cpu: %s was recorded without perf stat -A, so it has no per-CPU values", f.replay.file)
	}
	for _, h := range rec.Header {
		logger.Info("replay file", "header", h)
	}
	if len(rec.Header) == 0 {
		logger.Warn("replay file has no header comment saying where it was recorded", "file", f.replay.file)
	}
	b.replay.rec = rec
	return nil
}
