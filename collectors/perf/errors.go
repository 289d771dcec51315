package perf

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Reason classifies why an event could not be opened; it is a bounded label value.
type Reason string

const (
	ReasonPermission      Reason = "permission"
	ReasonUnsupported     Reason = "unsupported"
	ReasonFDLimit         Reason = "fd_limit"
	ReasonGroupDoesNotFit Reason = "group_does_not_fit"
	ReasonBusy            Reason = "busy"
	ReasonNoDevice        Reason = "no_device"
	ReasonInvalid         Reason = "invalid"
)

// OpenError says which event failed to open on which CPU, why, and what fixes it.
type OpenError struct {
	Event     string
	CPU       int
	Err       error
	Reason    Reason
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

// NewOpenError classifies err from opening event on cpu.
func NewOpenError(event string, cpu int, err error) *OpenError {
	return &OpenError{Event: event, CPU: cpu, Err: err, Reason: classify(err)}
}

func classify(err error) Reason {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return ReasonPermission
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		return ReasonUnsupported
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		return ReasonFDLimit
	case errors.Is(err, unix.EBUSY):
		return ReasonBusy
	case errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
		return ReasonNoDevice
	}
	return ReasonInvalid
}
