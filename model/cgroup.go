package model

// CgroupSnapshot is the per-cgroup attribution after a cycle.
type CgroupSnapshot struct {
	Cgroups []Cgroup
	// Unattributed are counts of spans in which the kernel skipped the
	// program for a switch, so that no single cgroup owns them.
	Unattributed []Count
	Switches     SwitchStats
	Tracked      int // cgroups in the kernel's map
	Errors       map[string]uint64
	TopDown      bool // some class computes per-cgroup Top-Down
	// PerfModeFDs are the fds perf's cgroup mode holds (its fallback only).
	PerfModeFDs int
}

// Cgroup is one series: a cgroup, or the cgroups beyond the series bound
// summed as "other".
type Cgroup struct {
	Path     string
	Identity PodIdentity
	Events   []Count // visible events, summed over core types
	Slots    float64
	Nodes    []Node // summed over core types
	HasSlots bool
}

// Count is one event's scaled count.
type Count struct {
	Event string
	Value float64
}

// SwitchStats are the attribution program's own counters, summed over CPUs.
type SwitchStats struct {
	MapFull        uint64 // credits lost because the cgroup map was full
	ReadFailed     uint64 // event reads that failed (an fd not placed on that CPU)
	Credits        uint64 // program runs that credited a cgroup
	SwitchesMissed uint64 // cgroup switches the kernel did not run the program for
	Unattributed   uint64 // credits filed under Unattributed because of them
	// Programs are what each of the attribution's programs cost.
	Programs []BPFProgram
	// Timed says the kernel measured the programs' run time
	// (kernel.bpf_stats_enabled, which only an operator turns on).
	Timed bool
}

// BPFProgram is one of the attribution's eBPF programs and what it cost.
type BPFProgram struct {
	// Name is the tracepoint it runs at (sched_switch, cpu_idle,
	// cgroup_attach_task), or credit_now, run by the exporter on each CPU
	// before every read.
	Name string
	// Runs counts its runs, early returns included, by its own count.
	Runs uint64
	// RunSeconds is the kernel's bpf_stats run time: all of it spent in
	// the tasks that switch, none in the exporter. Only while the
	// snapshot's Timed is true.
	RunSeconds float64
}

// Reasons of CgroupSnapshot.Errors.
const (
	CgroupErrCredit   = "credit"   // running the credit program on a CPU failed
	CgroupErrRead     = "read"     // reading the kernel's cgroup map failed
	CgroupErrWalk     = "walk"     // walking the cgroup hierarchy failed
	CgroupErrAttach   = "attach"   // attaching to a CPU's cgroup switches failed
	CgroupErrPlace    = "place"    // placing or removing an event fd failed
	CgroupErrForget   = "forget"   // removing a deleted cgroup from the map failed
	CgroupErrMapFull  = "map_full" // credits lost: the kernel's cgroup map was full
	CgroupErrAncestry = "ancestry" // a cgroup's ancestry was not recorded or not read: its counts reached it alone
)

// CgroupErrorReasons lists them, for metrics exported from zero.
var CgroupErrorReasons = []string{CgroupErrCredit, CgroupErrRead, CgroupErrWalk, CgroupErrAttach, CgroupErrPlace, CgroupErrForget, CgroupErrMapFull, CgroupErrAncestry}

// PodIdentity is what a Kubernetes cgroup path says of its pod and
// container.
type PodIdentity struct {
	PodUID      string // with dashes, as the API server writes it
	QoS         string // guaranteed, burstable or besteffort
	ContainerID string // the runtime's 64-hex id
	Runtime     string // containerd, cri-o or docker
}

// Node is one Top-Down node's slots: its fraction of each interval's slots,
// accumulated.
type Node struct {
	Name, Parent string
	Level        int
	Slots        float64
	// ChildrenEstimated: its children are separate estimates, not a
	// partition of it, so their sum is not held to it.
	ChildrenEstimated bool
}

// CgroupReading is one event's cumulative counts for one cgroup, as the
// attribution program's map holds them: the counter and its enabled and
// running times, summed over CPUs.
type CgroupReading struct {
	Counter, Enabled, Running uint64
}

// CgroupCounts is one read of the attribution program's map
// (kernel/cgroupcount), each cgroup's readings flattened over the core
// types' events in slot order, which the analysis (analysis/cgroupattr)
// rolls up into ancestors, bounds into series and feeds Top-Down.
type CgroupCounts struct {
	// Own are each cgroup's own readings (its tasks' credits, not its
	// descendants'), by cgroup id.
	Own map[uint64][]CgroupReading
	// Unattributed are the readings of spans no single cgroup owns (nil:
	// none yet).
	Unattributed []CgroupReading
	// Current says the id → path table was read after the counts: an id it
	// cannot resolve is a cgroup removed.
	Current bool
	// Tracked is how many cgroups the kernel's map holds.
	Tracked int
	// Placed says, by flattened index, which events had a file descriptor
	// in the program on some CPU at some time: an event whose group never
	// opened gets no series rather than a zero. The kernel side's own
	// slice: read it before its next cycle.
	Placed []bool
}
