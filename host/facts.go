package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Linux capability numbers (include/uapi/linux/capability.h).
const (
	CapIPCLock   = 14
	CapSysPtrace = 19
	CapSysAdmin  = 21
	CapPerfmon   = 38
	CapBPF       = 39
)

// CPU identifies the processor.
type CPU struct {
	Vendor     string // "GenuineIntel", "AuthenticAMD", or the Arm implementer code
	Family     string
	Model      string
	Stepping   string
	ModelName  string
	Hypervisor bool
	Flags      []string
	Arch       string // GOARCH of this build
}

// Facts is what the host says about itself. A value that could not be read is
// left at its zero value and the reason is in Errors.
type Facts struct {
	CPU           CPU
	Paranoid      int // kernel.perf_event_paranoid; ParanoidKnown says whether it was read
	ParanoidKnown bool
	MaxSampleRate int
	NMIWatchdog   bool
	// PtraceScope is Yama's kernel.yama.ptrace_scope (-1: no Yama): at 3
	// no process may read another's memory, CAP_SYS_PTRACE or not.
	PtraceScope  int
	CapEff       uint64
	CapKnown     bool
	Euid         int
	Cgroup2Mount string // where cgroup v2 is mounted, "" if not
	CgroupV1Perf string // where v1's perf_event controller is mounted, "" if not
	OnlineCPUs   []int
	Errors       []error
}

// HoldsCap says whether this process holds capability c in its effective
// set now, as procfs (under procRoot) says; false where it cannot be read.
func HoldsCap(procRoot string, c uint) bool {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return false
	}
	self, err := fs.Self()
	if err != nil {
		return false
	}
	st, err := self.NewStatus()
	return err == nil && st.CapEff&(1<<c) != 0
}

// HasCap reports whether the process holds an effective capability.
func (f Facts) HasCap(c uint) bool { return f.CapKnown && f.CapEff&(1<<c) != 0 }

// PerfEventCgroups is the mount of the cgroup hierarchy that holds the
// perf_event controller, the one cgroup-switches and PERF_FLAG_PID_CGROUP use,
// and whether it is cgroup v1's: where v1 mounts perf_event, v2 cannot have
// it. "" when neither is mounted.
func (f Facts) PerfEventCgroups() (mount string, v1 bool) {
	if f.CgroupV1Perf != "" {
		return f.CgroupV1Perf, true
	}
	return f.Cgroup2Mount, false
}

// CanCountSystemWide reports whether the privilege rules of perf_event_open(2)
// allow per-CPU counting of every task: CAP_PERFMON, CAP_SYS_ADMIN, or paranoid <= 0.
func (f Facts) CanCountSystemWide() bool {
	return f.HasCap(CapPerfmon) || f.HasCap(CapSysAdmin) || (f.ParanoidKnown && f.Paranoid <= 0)
}

// Read gathers the facts from procfs and sysfs roots.
func Read(procRoot, sysRoot string) Facts {
	var f Facts
	f.Euid = os.Geteuid()
	f.CPU.Arch = runtime.GOARCH
	fail := func(what string, err error) { f.Errors = append(f.Errors, fmt.Errorf("%s: %w", what, err)) }

	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		fail("procfs", err)
	} else {
		if infos, err := fs.CPUInfo(); err != nil {
			fail("cpuinfo", err)
		} else if len(infos) > 0 {
			i := infos[0]
			f.CPU = CPU{Vendor: i.VendorID, Family: i.CPUFamily, Model: i.Model, Stepping: i.Stepping,
				ModelName: i.ModelName, Flags: i.Flags, Arch: runtime.GOARCH,
				Hypervisor: slices.Contains(i.Flags, "hypervisor")}
		}
		if self, err := fs.Self(); err != nil {
			fail("procfs self", err)
		} else {
			if st, err := self.NewStatus(); err != nil {
				fail("process status", err)
			} else {
				f.CapEff, f.CapKnown = st.CapEff, true
			}
			if mounts, err := self.MountInfo(); err != nil {
				fail("mountinfo", err)
			} else {
				for _, m := range mounts {
					switch {
					case m.FSType == "cgroup2" && f.Cgroup2Mount == "":
						f.Cgroup2Mount = m.MountPoint
					case m.FSType == "cgroup" && hasOption(m.SuperOptions, "perf_event"):
						f.CgroupV1Perf = m.MountPoint
					}
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(sysRoot, "hypervisor", "type")); err == nil {
		f.CPU.Hypervisor = true
	}
	kernel := filepath.Join(procRoot, "sys", "kernel")
	if v, err := readInt(filepath.Join(kernel, "perf_event_paranoid")); err != nil {
		fail("perf_event_paranoid", err)
	} else {
		f.Paranoid, f.ParanoidKnown = v, true
	}
	if v, err := readInt(filepath.Join(kernel, "perf_event_max_sample_rate")); err == nil {
		f.MaxSampleRate = v
	}
	f.PtraceScope = -1
	if v, err := readInt(filepath.Join(kernel, "yama", "ptrace_scope")); err == nil {
		f.PtraceScope = v
	}
	if v, err := readInt(filepath.Join(kernel, "nmi_watchdog")); err == nil {
		f.NMIWatchdog = v != 0
	} else if !errors.Is(err, os.ErrNotExist) {
		fail("nmi_watchdog", err)
	}
	if cpus, err := OnlineCPUs(sysRoot); err != nil {
		fail("online CPUs", err)
	} else {
		f.OnlineCPUs = cpus
	}
	return f
}

func hasOption(opts map[string]string, name string) bool {
	_, ok := opts[name]
	return ok
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", path, strings.TrimSpace(string(b)))
	}
	return v, nil
}
