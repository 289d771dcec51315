package collector

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pmu-exporter/pmu_exporter/kernel/rlimit"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfcount"
	"github.com/pmu-exporter/pmu_exporter/kernel/probe"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
	"github.com/pmu-exporter/pmu_exporter/plan/config"
	"github.com/pmu-exporter/pmu_exporter/plan/profile"
)

// setup is what both commands need: the host, its PMUs, the capability verdict and
// the groups to count.
type setup struct {
	pmus         []*pmu.PMU
	facts        host.Facts
	report       capability.Report
	groups       []perfcount.GroupSpec
	configErrors []error
	// midrs are the CPUs' MIDR_EL1 (arm64): how their Arm SPE data
	// sources are encoded.
	midrs map[int]uint64
	// tscHz measures the TSC's frequency, for Intel's nodes below level 3
	// (MeasureTSC on this host's PMUs; nil: measured so).
	tscHz func() (float64, error)
}

// midr is cpu's MIDR_EL1, 0 where unknown.
func (s setup) midr(cpu int) uint64 { return s.midrs[cpu] }

func discover(f Options) setup {
	var s setup
	s.facts = host.Read(f.procfs, f.sysfs)
	pmus, err := pmu.Discover(f.sysfs)
	if err != nil {
		s.facts.Errors = append(s.facts.Errors, err)
	}
	s.pmus = pmus
	if s.midrs, err = host.MIDRs(f.sysfs); err != nil {
		s.facts.Errors = append(s.facts.Errors, err)
	}
	s.report = capability.Build(s.facts, pmus, host.ReadCounters(s.facts.CPU.Vendor), probe.Live(s.facts))
	s.report.Features = append(s.report.Features,
		accessCounting(s.facts.CPU, pmus, s.report.Feature(capability.HardwareCounters), perf.Probe))

	cfg := &config.Config{DefaultProfile: true}
	if f.configFile != "" {
		b, err := safeopen.ReadInput("--config.file", f.configFile, safeopen.YAML, nil)
		if err == nil {
			cfg, err = config.Parse(f.configFile, b)
		}
		if err != nil {
			s.configErrors = append(s.configErrors, unjoin(err)...)
			if cfg == nil {
				cfg = &config.Config{DefaultProfile: true}
			}
		}
	}
	var groups []config.Group
	if cfg.DefaultProfile {
		hw := s.report.Feature(capability.HardwareCounters).Available
		groups = profile.Default(hw)
		if hw && f.infoEvents {
			groups = append(groups, profile.Info()...)
			groups = append(groups, treeInfo(f.tree.uarch, s)...)
		}
	}
	groups = append(groups, cfg.Groups...)
	specs, err := profile.Build(groups, pmus)
	s.configErrors = append(s.configErrors, unjoin(err)...)
	s.groups = specs
	if note := fdNote(specs, s.facts.OnlineCPUs); note != "" {
		s.report.Notes = append(s.report.Notes, note)
	}
	return s
}

// fdNote warns when the groups need more file descriptors (one per event per CPU)
// than the open-file limit allows, before the kernel refuses them one by one.
func fdNote(groups []perfcount.GroupSpec, online []int) string {
	need := 0
	for _, g := range groups {
		cpus := len(online)
		if c := g.CPUs(); c != nil {
			cpus = 0
			for _, cpu := range c {
				if slices.Contains(online, cpu) {
					cpus++
				}
			}
		}
		need += len(g.Events) * cpus
	}
	limit, err := rlimit.OpenFiles()
	if err != nil {
		return ""
	}
	const reserve = 64 // listeners, scrapes, /proc and /sys reads
	if uint64(need+reserve) <= limit {
		return ""
	}
	return fmt.Sprintf("the event groups need %d file descriptors (one per event per CPU) but the open-file limit is %d: raise it (ulimit -n, LimitNOFILE=, or the container's nofile rlimit) or count fewer events",
		need, limit)
}

// raiseMemlock lifts the locked-memory limit as far as the process may,
// before any ring, AUX area or BPF map is made (rlimit.RaiseMemlock), and
// says what it did.
func raiseMemlock(logger *slog.Logger, ipcLock bool) {
	from, to, err := rlimit.RaiseMemlock()
	switch {
	case err != nil && ipcLock:
		// CAP_IPC_LOCK exempts perf rings and BPF maps from the limit: not
		// raising it (no CAP_SYS_RESOURCE) costs nothing.
		logger.Debug("locked-memory limit unchanged (no CAP_SYS_RESOURCE); CAP_IPC_LOCK exempts perf rings and BPF maps from it", "limit", rlimit.KiB(from))
	case err != nil:
		logger.Info("locked-memory limit unchanged: perf rings beyond kernel.perf_event_mlock_kb need CAP_IPC_LOCK, or CAP_SYS_RESOURCE to raise it", "limit", rlimit.KiB(from), "err", err)
	case from != to:
		logger.Info("locked-memory limit raised, for perf rings beyond kernel.perf_event_mlock_kb", "from", rlimit.KiB(from), "to", rlimit.KiB(to))
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// tscWindow is how long measureTSC counts the TSC: a fifth of a second
// gives its rate to a few parts per million.
const tscWindow = 200 * time.Millisecond
