// Package model holds the values that collectors hand to the math and
// export layers: counting snapshots with their open failures, per-cgroup
// snapshots, Top-Down tree nodes and pod identities. It imports nothing of
// the project and no syscall package, so that topdown, exporter, replay and
// the formats of other tools can use these values without reaching the
// kernel (a test over go list -deps holds them to it).
package model

import (
	"fmt"
	"sort"
)

// Snapshot is the counting engine's totals at the end of a read cycle.
type Snapshot struct {
	Events     []EventTotals
	Groups     []GroupTotals
	ReadErrors map[string]uint64
	// Reopened counts, per CPU, the times its events were found dead
	// (detached by a quick offline and online) and reopened.
	Reopened map[int]uint64
	Cycles   uint64
}

// EventTotals are one event's scaled counts, per CPU.
type EventTotals struct {
	Group, Event, PMU string
	Hidden            bool // from a hidden group
	Scale             float64
	Unit              string
	PerCPU            map[int]uint64
}

// Sum adds an event's totals over CPUs.
func (t EventTotals) Sum() uint64 {
	var s uint64
	for _, v := range t.PerCPU {
		s += v
	}
	return s
}

// GroupTotals describe one group across CPUs.
type GroupTotals struct {
	Name                 string
	EnabledNS, RunningNS map[int]uint64 // per CPU
	NotRunning           uint64         // intervals, summed over CPUs
	OpenCPUs             int
	// Failures counts CPUs where the group is not open, by reason; Failure holds
	// one example error per reason.
	Failures map[OpenReason]int
	Failure  map[OpenReason]*OpenError
	Hidden   bool
	// Split is true when the group did not fit the PMU and its events are counted
	// by single-event groups named "<group>/<event>".
	Split bool
}

// SortedCPUs returns the keys of a per-CPU map in order.
func SortedCPUs[V any](m map[int]V) []int {
	cpus := make([]int, 0, len(m))
	for c := range m {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	return cpus
}

// OpenReason classifies why an event could not be opened; it is a bounded
// label value.
type OpenReason string

// The reasons an event cannot be opened.
const (
	ReasonPermission      OpenReason = "permission"
	ReasonUnsupported     OpenReason = "unsupported"
	ReasonFDLimit         OpenReason = "fd_limit"
	ReasonGroupDoesNotFit OpenReason = "group_does_not_fit"
	ReasonBusy            OpenReason = "busy"
	ReasonNoDevice        OpenReason = "no_device"
	ReasonInvalid         OpenReason = "invalid"
)

// OpenError is an event that could not be opened on a CPU, classified.
type OpenError struct {
	Event     string
	CPU       int
	Err       error
	Reason    OpenReason
	GroupSize int // for ReasonGroupDoesNotFit
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("opening %s on CPU %d: %v (%s): %s", e.Event, e.CPU, e.Err, e.Reason, e.Fix())
}

func (e *OpenError) Unwrap() error { return e.Err }

// Fix is the advice for the reason.
func (e *OpenError) Fix() string {
	switch e.Reason {
	case ReasonPermission:
		return "system-wide counting needs CAP_PERFMON (or CAP_SYS_ADMIN), or sysctl kernel.perf_event_paranoid=0 or lower"
	case ReasonUnsupported:
		return "the kernel or the CPU does not provide this event (a VM without a virtual PMU has no hardware events); see 'pmu_exporter check'"
	case ReasonFDLimit:
		return "each event needs one file descriptor per CPU: raise the open-file limit (ulimit -n, LimitNOFILE=, or the container's nofile rlimit)"
	case ReasonGroupDoesNotFit:
		return fmt.Sprintf("the %d events cannot be counted together on this PMU's counters (each opens alone): split the group", e.GroupSize)
	case ReasonBusy:
		return "the counters are held exclusively by another user (an exclusive or pinned event elsewhere)"
	case ReasonNoDevice:
		return "the CPU is offline or this PMU does not cover it"
	default:
		return "the kernel rejected the event's attributes (a modifier or term this PMU does not accept?)"
	}
}
