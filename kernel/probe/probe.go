// Package probe asks the running kernel whether each capability works, for
// capability.Build: the part of the capability check that makes syscalls.
package probe

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpuhotplug"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
)

// systemWide opens cpu-clock on each of cpus, all tasks. A CPU that went
// offline since the list was read (ENODEV: another process's hotplug) says
// nothing of the privilege this asks about, and is passed over: it made
// check exit 1, and serve say it could not count, once under a neighbour's
// hotplug. At least one CPU must count.
func systemWide(cpus []int) error {
	opened := 0
	for _, cpu := range cpus {
		g, err := perf.OpenGroup([]eventspec.Attr{{Type: pmu.TypeSoftware, Config: unix.PERF_COUNT_SW_CPU_CLOCK}},
			[]string{"cpu-clock"}, perf.SystemWide(cpu))
		if errors.Is(err, unix.ENODEV) {
			continue
		}
		if err != nil {
			return err
		}
		g.Close()
		opened++
	}
	if opened == 0 {
		return fmt.Errorf("cpu-clock could be opened on none of the CPUs %v: all offline now", cpus)
	}
	return nil
}

// Live asks the running kernel.
func Live(f host.Facts) capability.Probes {
	return capability.Probes{
		// A core PMU need not implement every generic event (QEMU's
		// arm64 counts cycles, and instructions only with -icount):
		// either one makes hardware counters.
		Hardware: func() error {
			err := perf.Probe(eventspec.Attr{Type: pmu.TypeHardware, Config: unix.PERF_COUNT_HW_INSTRUCTIONS})
			if err != nil && perf.Probe(eventspec.Attr{Type: pmu.TypeHardware, Config: unix.PERF_COUNT_HW_CPU_CYCLES}) == nil {
				return nil
			}
			return err
		},
		SystemWide:      func() error { return systemWide(f.OnlineCPUs) },
		Breakpoint:      perf.ProbeBreakpoint,
		AddressSampling: addressSampling,
		EBPF: func() error {
			err := features.HaveProgramType(ebpf.PerfEvent)
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: %v", capability.ErrNotSupported, err)
			}
			return err
		},
		HotplugUevents: func() error {
			l, err := cpuhotplug.Listen()
			if err != nil {
				return err
			}
			return l.Close()
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

// addressSampling samples this thread's user-mode CPU time with its
// registers for a few milliseconds and checks that a sample carries them,
// its instruction pointer register equal to the sample's IP, and that the
// code there can be read through /proc/self/mem as the sampler reads other
// processes'.
func addressSampling() error {
	if _, err := memop.NewResolver(nil, runtime.GOARCH); err != nil {
		return fmt.Errorf("%w: %v", capability.ErrNotSupported, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const st = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_REGS_USER
	a := perf.Attr(eventspec.Attr{Type: pmu.TypeSoftware, Config: unix.PERF_COUNT_SW_CPU_CLOCK, ExcludeKernel: true})
	a.Read_format = 0
	a.Sample = 100000 // 100 µs
	a.Sample_type = st
	a.Sample_regs_user = memop.RegsMask(runtime.GOARCH)
	a.Bits |= unix.PerfBitDisabled | unix.PerfBitExcludeHv
	fd, err := perf.OpenFD(&a, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return err
	}
	defer perf.CloseFD(fd)
	ring, err := perfring.Open(fd, 1)
	if err != nil {
		return err
	}
	defer ring.Close()
	if err := perf.Enable(fd); err != nil {
		return err
	}
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
	}
	ipReg := memop.AMD64IP
	if runtime.GOARCH == "arm64" {
		ipReg = memop.ARM64PC
	}
	l := perfrecord.Layout{SampleType: st, RegsUser: a.Sample_regs_user}
	var s perfrecord.Sample
	var samples, withRegs int
	var codeErr error
	ring.Read(func(rec []byte) bool {
		if perfrecord.DecodeSample(rec, &l, &s) != nil {
			return true
		}
		samples++
		if s.RegsABI != 0 && s.Regs[ipReg] == s.IP {
			withRegs++
			if withRegs == 1 {
				codeErr = readOwnCode(s.IP)
			}
		}
		return true
	})
	switch {
	case samples == 0:
		return errors.New("20 ms of this thread's CPU time gave no user-mode cpu-clock sample")
	case withRegs == 0:
		return fmt.Errorf("none of %d samples carried the user registers with the instruction pointer at the sample's IP", samples)
	case codeErr != nil:
		return fmt.Errorf("the sampled code cannot be read from process memory: %w", codeErr)
	}
	return nil
}

// readOwnCode reads 16 bytes at ip through /proc/self/mem.
func readOwnCode(ip uint64) error {
	f, err := os.Open("/proc/self/mem")
	if err != nil {
		return err
	}
	defer f.Close()
	var b [16]byte
	_, err = f.ReadAt(b[:], int64(ip))
	return err
}
