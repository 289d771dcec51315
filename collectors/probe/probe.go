// Package probe asks the running kernel whether each capability works, for
// capability.Build: the part of the capability check that makes syscalls.
package probe

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/perf"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// Live asks the running kernel.
func Live(f host.Facts) capability.Probes {
	return capability.Probes{
		Hardware: func() error {
			return perf.Probe(eventspec.Attr{Type: pmu.TypeHardware, Config: unix.PERF_COUNT_HW_INSTRUCTIONS})
		},
		SystemWide: func() error {
			for _, cpu := range f.OnlineCPUs {
				g, err := perf.OpenGroup([]eventspec.Attr{{Type: pmu.TypeSoftware, Config: unix.PERF_COUNT_SW_CPU_CLOCK}},
					[]string{"cpu-clock"}, perf.SystemWide(cpu))
				if err != nil {
					return err
				}
				g.Close()
			}
			return nil
		},
		Breakpoint: perf.ProbeBreakpoint,
		EBPF: func() error {
			err := features.HaveProgramType(ebpf.PerfEvent)
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: %v", capability.ErrNotSupported, err)
			}
			return err
		},
		Cgroup: func() error {
			dir, _ := f.PerfEventCgroups()
			if dir == "" {
				return errors.New("no cgroup v2 hierarchy and no v1 perf_event hierarchy is mounted")
			}
			d, err := os.Open(dir)
			if err != nil {
				return err
			}
			defer d.Close()
			return perf.ProbeCgroup(int(d.Fd()), 0)
		},
	}
}
