package perf

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/model"
)

// Reason classifies why an event could not be opened (model.OpenReason).
type Reason = model.OpenReason

// The reasons, as model names them.
const (
	ReasonPermission      = model.ReasonPermission
	ReasonUnsupported     = model.ReasonUnsupported
	ReasonFDLimit         = model.ReasonFDLimit
	ReasonGroupDoesNotFit = model.ReasonGroupDoesNotFit
	ReasonBusy            = model.ReasonBusy
	ReasonNoDevice        = model.ReasonNoDevice
	ReasonInvalid         = model.ReasonInvalid
)

// OpenError is an event that could not be opened on a CPU (model.OpenError).
type OpenError = model.OpenError

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
