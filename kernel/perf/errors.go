package perf

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/model"
)

// NewOpenError classifies err from opening event on cpu.
func NewOpenError(event string, cpu int, err error) *model.OpenError {
	return &model.OpenError{Event: event, CPU: cpu, Err: err, Reason: classify(err)}
}

func classify(err error) model.OpenReason {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return model.ReasonPermission
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		return model.ReasonUnsupported
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		return model.ReasonFDLimit
	case errors.Is(err, unix.EBUSY):
		return model.ReasonBusy
	case errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
		return model.ReasonNoDevice
	}
	return model.ReasonInvalid
}
