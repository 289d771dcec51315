// Package capability decides what this host lets the exporter measure, and for
// everything it cannot, why and what would fix it. It combines the PMUs found in
// sysfs, the host facts and live probes (perf_event_open and bpf calls that are
// opened and closed at once) into one Report, which `pmu_exporter check` prints,
// the exporter logs at start, and pmu_capability exports.
package capability

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Feature names: the values of pmu_capability's feature label.
const (
	HardwareCounters = "hardware_counters"
	PreciseSampling  = "precise_sampling"
	PerfMetrics      = "perf_metrics"
	IBS              = "ibs"
	SPE              = "spe"
	Breakpoints      = "breakpoints"
	// AddressSampling: user-mode timer samples carry the registers, so the
	// sampled instruction's memory operand gives the data address without
	// a precise PMU.
	AddressSampling = "address_sampling"
	// CodeReads: the address sampler may read the code and mappings of
	// every process it samples (/proc/PID/mem, /proc/PID/root), those of
	// other users too: CAP_SYS_PTRACE.
	CodeReads    = "code_reads"
	EBPF         = "ebpf"
	CgroupEvents = "cgroup_events"
	// CgroupAttribution is judged by serve and check, which load the eBPF
	// attribution program: it is not in Build's report.
	CgroupAttribution = "cgroup_attribution"
	// AccessCounting: a core PMU counts each thread's loads and stores,
	// ReuseTracker's distance clock; judged by serve and check from the
	// host's event lists.
	AccessCounting = "access_counting"
	SystemWide     = "system_wide"
	// HotplugUevents: the kernel's CPU hotplug uevents reach the exporter,
	// so a CPU that comes online is counted from then, not from the next
	// read.
	HotplugUevents = "cpu_hotplug_uevents"
)

// Feature is one capability with its verdict.
type Feature struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail,omitempty"` // what was found
	Reason    string `json:"reason,omitempty"` // why not, when unavailable
	Fix       string `json:"fix,omitempty"`    // what would make it available
}

// PMUSummary describes one PMU for the report.
type PMUSummary struct {
	Name       string `json:"name"`
	Type       uint32 `json:"type"`
	Core       bool   `json:"core"`
	Events     int    `json:"events"`
	MaxPrecise string `json:"max_precise,omitempty"`
	PMUName    string `json:"pmu_name,omitempty"`
	CPUs       string `json:"cpus,omitempty"`
}

// Report is the whole verdict.
type Report struct {
	Vendor      string        `json:"vendor"`
	Family      string        `json:"family"`
	Model       string        `json:"model"`
	Stepping    string        `json:"stepping"`
	ModelName   string        `json:"model_name"`
	Hypervisor  bool          `json:"hypervisor"`
	CorePMU     string        `json:"core_pmu_name"` // caps/pmu_name, or the core PMU's name, or "none"
	OnlineCPUs  string        `json:"online_cpus"`
	Paranoid    *int          `json:"perf_event_paranoid"`
	MaxSample   int           `json:"perf_event_max_sample_rate"`
	NMIWatchdog bool          `json:"nmi_watchdog"`
	Caps        []string      `json:"capabilities"` // effective, of those that matter
	Cgroup      string        `json:"cgroup"`       // "v2", "v1", "v1+v2", "none"
	Counters    host.Counters `json:"counters"`
	PMUs        []PMUSummary  `json:"pmus"`
	Features    []Feature     `json:"features"`
	Notes       []string      `json:"notes,omitempty"`
	// Runnable is false only when the exporter cannot count anything system-wide.
	Runnable bool `json:"runnable"`
}

// Feature returns the named feature.
func (r Report) Feature(name string) Feature {
	for _, f := range r.Features {
		if f.Name == name {
			return f
		}
	}
	return Feature{Name: name}
}

// Probes are live checks; each returns nil when the thing works.
type Probes struct {
	Hardware   func() error // a generic hardware event on this thread
	SystemWide func() error // a software event on every CPU, all tasks
	Breakpoint func() error // a hardware watchpoint on this thread
	// AddressSampling: a user-mode cpu-clock sample of this thread with
	// its registers, whose instruction pointer register is the sample's IP.
	AddressSampling func() error
	EBPF            func() error // loading a perf_event BPF program
	Cgroup          func() error // a cgroup-scoped event
	// HotplugUevents: listening to the kernel's CPU hotplug uevents
	// (optional, as AddressSampling).
	HotplugUevents func() error
}

// Build judges every feature.
func Build(f host.Facts, pmus []*pmu.PMU, counters host.Counters, p Probes) Report {
	r := newReport(f, counters)
	cores, byName := r.summarize(pmus)
	privilege := privilegeFix(f)
	sw := p.SystemWide()
	r.Runnable = sw == nil
	r.add(feature(SystemWide, sw, "software events on every CPU", privilege))
	hw := hardwareFeature(f, cores, counters, p.Hardware(), privilege)
	r.add(hw)
	pre, ibs, spe := preciseFeatures(f, cores, pmus, byName, hw)
	r.add(pre)
	r.add(perfMetricsFeature(f, cores))
	r.add(ibs)
	r.add(spe)
	r.add(breakpointFeature(p.Breakpoint(), byName, privilege))
	if p.AddressSampling != nil {
		err := p.AddressSampling()
		if err == nil && sw != nil {
			// This thread's samples carry registers, but the address
			// sampler samples every CPU's tasks.
			err = fmt.Errorf("the address sampler samples every CPU, which is refused: %w", sw)
		}
		r.add(feature(AddressSampling, err, "user-mode timer samples carry the registers: data addresses from the sampled instructions, no precise PMU needed",
			"needs CAP_PERFMON (or perf_event_paranoid <= 0) to sample every CPU, and PERF_SAMPLE_REGS_USER (Linux 3.7, x86-64 or arm64)"))
		r.add(codeReadsFeature(f))
	}
	bpfFix := "eBPF needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) and a kernel with CONFIG_BPF_SYSCALL"
	r.add(feature(EBPF, p.EBPF(), "perf_event BPF programs load", bpfFix))
	r.add(feature(CgroupEvents, p.Cgroup(), "events scoped to a cgroup ("+r.Cgroup+")",
		"mount cgroup v2 (or v1's perf_event controller) and run with CAP_PERFMON or CAP_SYS_ADMIN"))
	if p.HotplugUevents != nil {
		r.add(feature(HotplugUevents, p.HotplugUevents(), "the kernel's CPU hotplug uevents reach the exporter: a CPU that comes online is counted from then",
			"run the pod without a user namespace of its own (hostUsers: true, the default); without the uevents a CPU that comes online is counted from the next read"))
	}
	for _, pf := range platformFeatures(byName, f.CPU.Hypervisor, f.CPU.Family) {
		r.add(pf)
	}
	if f.NMIWatchdog && hw.Available && strings.HasPrefix(f.CPU.Arch, "amd64") {
		r.Notes = append(r.Notes, "the NMI watchdog holds one hardware counter: sysctl kernel.nmi_watchdog=0 frees it")
	}
	if !f.CanCountSystemWide() && f.ParanoidKnown {
		r.Notes = append(r.Notes, privilege)
	}
	for _, err := range f.Errors {
		r.Notes = append(r.Notes, "could not read "+err.Error())
	}
	return r
}

// newReport starts a report with the host's identity, privileges and
// cgroup hierarchies.
func newReport(f host.Facts, counters host.Counters) Report {
	r := Report{
		Vendor: f.CPU.Vendor, Family: f.CPU.Family, Model: f.CPU.Model, Stepping: f.CPU.Stepping,
		ModelName: f.CPU.ModelName, Hypervisor: f.CPU.Hypervisor, OnlineCPUs: cpuset.Format(f.OnlineCPUs),
		MaxSample: f.MaxSampleRate, NMIWatchdog: f.NMIWatchdog, Counters: counters, CorePMU: "none",
	}
	if f.ParanoidKnown {
		r.Paranoid = &f.Paranoid
	}
	for _, c := range []struct {
		n    uint
		name string
	}{{host.CapPerfmon, "CAP_PERFMON"}, {host.CapBPF, "CAP_BPF"}, {host.CapSysAdmin, "CAP_SYS_ADMIN"}, {host.CapSysPtrace, "CAP_SYS_PTRACE"}} {
		if f.HasCap(c.n) {
			r.Caps = append(r.Caps, c.name)
		}
	}
	switch {
	case f.Cgroup2Mount != "" && f.CgroupV1Perf != "":
		r.Cgroup = "v1+v2"
	case f.Cgroup2Mount != "":
		r.Cgroup = "v2"
	case f.CgroupV1Perf != "":
		r.Cgroup = "v1"
	default:
		r.Cgroup = "none"
	}
	return r
}

// summarize lists the PMUs in the report and returns the core ones and
// every one by name.
func (r *Report) summarize(pmus []*pmu.PMU) (cores []*pmu.PMU, byName map[string]*pmu.PMU) {
	byName = map[string]*pmu.PMU{}
	for _, p := range pmus {
		byName[p.Name] = p
		s := PMUSummary{Name: p.Name, Type: p.Type, Core: p.IsCore(), Events: len(p.Aliases),
			MaxPrecise: p.Caps["max_precise"], PMUName: p.Caps["pmu_name"]}
		if p.CPUs != nil {
			s.CPUs = cpuset.Format(p.CPUs)
		}
		r.PMUs = append(r.PMUs, s)
		if p.IsCore() {
			cores = append(cores, p)
		}
	}
	if len(cores) > 0 {
		r.CorePMU = cores[0].Name
		if n := cores[0].Caps["pmu_name"]; n != "" {
			r.CorePMU = n
		}
	}
	return cores, byName
}

// hardwareFeature is the core PMU's verdict: err is the hardware probe's.
func hardwareFeature(f host.Facts, cores []*pmu.PMU, counters host.Counters, err error, privilege string) Feature {
	hw := Feature{Name: HardwareCounters}
	switch {
	case len(cores) == 0:
		hw.Reason = "no core PMU in /sys/bus/event_source/devices"
		if f.CPU.Hypervisor {
			hw.Reason += " and the CPU reports a hypervisor: this VM does not expose a PMU"
			hw.Fix = "run on bare metal or enable the virtual PMU (KVM: -cpu host,pmu=on; cloud: an instance type with PMU access, usually whole-socket or metal sizes)"
		} else {
			hw.Fix = "the kernel has no driver for this CPU's PMU (CONFIG_PERF_EVENTS and the vendor PMU driver must be built in)"
		}
	case err != nil:
		hw.Reason = "core PMU " + cores[0].Name + " is present but " + err.Error()
		hw.Fix = fixFor(err, privilege)
	default:
		hw.Available = true
		hw.Detail = "core PMUs: " + joinNames(cores)
		if counters.Known {
			hw.Detail += fmt.Sprintf("; %d general-purpose and %d fixed counters per CPU (%s)", counters.GeneralPurpose, counters.Fixed, counters.Source)
		}
	}
	return hw
}

// preciseFeatures are precise sampling (PEBS, caps/max_precise > 0 on
// Intel; IBS; or SPE) and IBS's and SPE's own verdicts.
func preciseFeatures(f host.Facts, cores, pmus []*pmu.PMU, byName map[string]*pmu.PMU, hw Feature) (pre, ibs, spe Feature) {
	pre, ibs, spe = Feature{Name: PreciseSampling}, Feature{Name: IBS}, Feature{Name: SPE}
	var kinds []string
	for _, c := range cores {
		if n, _ := strconv.Atoi(c.Caps["max_precise"]); n > 0 && strings.HasPrefix(f.CPU.Vendor, "GenuineIntel") {
			kinds = append(kinds, fmt.Sprintf("PEBS on %s (max_precise=%d)", c.Name, n))
		}
	}
	if byName["ibs_op"] != nil || byName["ibs_fetch"] != nil {
		ibs.Available, ibs.Detail = true, "ibs_op/ibs_fetch PMUs"
		kinds = append(kinds, "IBS")
	} else {
		ibs.Reason = "no ibs_op or ibs_fetch PMU"
		ibs.Fix = notOurs(f, "IBS is an AMD feature (family 10h and later); the kernel exposes it as the ibs_op PMU")
	}
	for _, p := range pmus {
		if strings.HasPrefix(p.Name, "arm_spe") {
			spe.Available, spe.Detail = true, p.Name
			kinds = append(kinds, "SPE ("+p.Name+")")
		}
	}
	if !spe.Available {
		spe.Reason = "no arm_spe PMU"
		spe.Fix = notOurs(f, "SPE is an Armv8.2+ feature; load the arm_spe_pmu driver (CONFIG_ARM_SPE_PMU) and, in a VM, enable SPE for the guest")
	}
	if len(kinds) > 0 {
		pre.Available, pre.Detail = true, strings.Join(kinds, ", ")
	} else {
		pre.Reason = "no PEBS (caps/max_precise), IBS or SPE PMU"
		pre.Fix = hw.Fix
		if hw.Available {
			pre.Fix = "this CPU or its virtualisation offers no precise sampling to the kernel"
		}
	}
	return pre, ibs, spe
}

// perfMetricsFeature says whether a core PMU has Intel's PERF_METRICS
// (the slots and topdown-* events).
func perfMetricsFeature(f host.Facts, cores []*pmu.PMU) Feature {
	pm := Feature{Name: PerfMetrics}
	for _, c := range cores {
		if _, ok := c.Aliases["slots"]; ok {
			if _, ok := c.Aliases["topdown-retiring"]; ok {
				pm.Available, pm.Detail = true, "slots and topdown-* on "+c.Name
				break
			}
		}
	}
	if !pm.Available {
		pm.Reason = "no core PMU has the slots and topdown-* events"
		pm.Fix = notOurs(f, "PERF_METRICS exists on Intel Icelake and later P-cores (kernel 5.9+); Top-Down falls back to counting events")
	}
	return pm
}

// breakpointFeature is the watchpoints' verdict: bpErr is the breakpoint
// probe's.
func breakpointFeature(bpErr error, byName map[string]*pmu.PMU, privilege string) Feature {
	if byName["breakpoint"] == nil {
		return Feature{Name: Breakpoints, Reason: "no breakpoint PMU", Fix: "the kernel lacks CONFIG_HAVE_HW_BREAKPOINT"}
	}
	bp := feature(Breakpoints, bpErr, "hardware watchpoints fire (a write watchpoint counted at least 990 of 1000 writes)", privilege)
	if errors.Is(bpErr, ErrNotSupported) || errors.Is(bpErr, ErrNotInHardware) {
		bp.Fix = "watchpoints need the CPU's debug registers: KVM passes them to guests; where a hypervisor does not, run on bare metal or another instance type"
	}
	return bp
}

func (r *Report) add(f Feature) { r.Features = append(r.Features, f) }

func feature(name string, err error, detail, fix string) Feature {
	if err == nil {
		return Feature{Name: name, Available: true, Detail: detail}
	}
	return Feature{Name: name, Reason: err.Error(), Fix: fixFor(err, fix)}
}

// codeReadsFeature judges whether the address sampler may read every
// sampled process's code: without it, the samples of other users'
// processes end as unreadable_code (pmu_address_samples_total).
func codeReadsFeature(f host.Facts) Feature {
	const detail = "CAP_SYS_PTRACE: the address sampler reads the code and mappings of every process it samples, other users' too"
	switch {
	case !f.CapKnown:
		return Feature{Name: CodeReads, Reason: "the process's capabilities could not be read", Fix: "give the exporter CAP_SYS_PTRACE"}
	case !f.HasCap(host.CapSysPtrace):
		return Feature{Name: CodeReads, Reason: "no CAP_SYS_PTRACE: the code of processes of other users cannot be read, and their samples end as unreadable_code",
			Fix: "add SYS_PTRACE to the container's capabilities (the Helm chart does), or run as root outside a container"}
	case f.PtraceScope >= 3:
		return Feature{Name: CodeReads, Reason: "kernel.yama.ptrace_scope is 3: no process may read another's memory, CAP_SYS_PTRACE or not; samples end as unreadable_code",
			Fix: "kernel.yama.ptrace_scope=2 (or lower) lets CAP_SYS_PTRACE read; 3 cannot be lowered without a reboot"}
	}
	return Feature{Name: CodeReads, Available: true, Detail: detail}
}

// ErrNotSupported marks a probe's error as the kernel lacking the feature
// (kernel/probe wraps cilium/ebpf's with it).
var ErrNotSupported = errors.New("not supported by this kernel")

// ErrNotInHardware marks a probe's error as the machine lacking what the
// kernel supports: watchpoints that open but do not fire where a
// hypervisor keeps the debug registers from its guests.
var ErrNotInHardware = errors.New("not provided by this machine")

func fixFor(err error, privilege string) string {
	var oe *model.OpenError
	if errors.As(err, &oe) && oe.Reason != model.ReasonPermission {
		return oe.Fix()
	}
	if errors.Is(err, ErrNotSupported) {
		return "the kernel does not support this"
	}
	if errors.Is(err, ErrNotInHardware) {
		return "the machine does not provide this: run on bare metal or another instance type"
	}
	return privilege
}

func privilegeFix(f host.Facts) string {
	p := "unknown"
	if f.ParanoidKnown {
		p = strconv.Itoa(f.Paranoid)
	}
	return "perf_event_paranoid is " + p + ": run as root, or grant CAP_PERFMON (Kubernetes: securityContext.capabilities.add), or sysctl -w kernel.perf_event_paranoid=0"
}

func notOurs(f host.Facts, msg string) string {
	if f.CPU.Hypervisor {
		return msg + "; this VM may also hide it"
	}
	return msg
}

func joinNames(ps []*pmu.PMU) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name)
	}
	return strings.Join(s, ", ")
}
