package perf

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This package is the only caller of perf_event_open and of the perf ioctls
// (internal/layering holds the other collectors to it); the sampler and the
// cgroup program open and steer their events through these.

// OpenFD opens one event (always close-on-exec) and returns its fd: pid and
// cpu as perf_event_open(2) takes them, group the leader's fd or -1, flags
// PERF_FLAG_* beyond FD_CLOEXEC (PERF_FLAG_PID_CGROUP).
func OpenFD(attr *unix.PerfEventAttr, pid, cpu, group, flags int) (int, error) {
	return unix.PerfEventOpen(attr, pid, cpu, group, flags|unix.PERF_FLAG_FD_CLOEXEC)
}

// Enable starts the event fd (PERF_EVENT_IOC_ENABLE).
func Enable(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_ENABLE: %w", err)
	}
	return nil
}

// enableGroup starts a leader and its members together.
func enableGroup(leader int) error {
	return unix.IoctlSetInt(leader, unix.PERF_EVENT_IOC_ENABLE, unix.PERF_IOC_FLAG_GROUP)
}

// SetOutput makes fd write its records into target's ring buffer
// (PERF_EVENT_IOC_SET_OUTPUT: one ring per CPU for several events).
func SetOutput(fd, target int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, target); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_SET_OUTPUT: %w", err)
	}
	return nil
}

// ID is the kernel's id of the event fd (PERF_EVENT_IOC_ID), which its
// records and group reads carry.
func ID(fd int) (uint64, error) {
	var id uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id))); errno != 0 {
		return 0, fmt.Errorf("PERF_EVENT_IOC_ID: %w", errno)
	}
	return id, nil
}

// SetPeriod changes a sampling event's period (PERF_EVENT_IOC_PERIOD), from
// its next sample on.
func SetPeriod(fd int, period uint64) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_PERIOD, uintptr(unsafe.Pointer(&period))); errno != 0 {
		return fmt.Errorf("PERF_EVENT_IOC_PERIOD: %w", errno)
	}
	return nil
}

// Disable stops the event fd (PERF_EVENT_IOC_DISABLE).
func Disable(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_DISABLE: %w", err)
	}
	return nil
}

// Refresh enables a sampling event for n more overflows, after which the
// kernel disables it (PERF_EVENT_IOC_REFRESH: the event limit, which adds
// to what is left of it).
func Refresh(fd, n int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_REFRESH, n); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_REFRESH: %w", err)
	}
	return nil
}

// ModifyAttributes changes an open event's attributes in place
// (PERF_EVENT_IOC_MODIFY_ATTRIBUTES, Linux 4.17; breakpoints only: the
// watched address, length and type), far cheaper than closing and opening
// it again.
func ModifyAttributes(fd int, attr *unix.PerfEventAttr) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_MODIFY_ATTRIBUTES, uintptr(unsafe.Pointer(attr))); errno != 0 {
		return fmt.Errorf("PERF_EVENT_IOC_MODIFY_ATTRIBUTES: %w", errno)
	}
	return nil
}

// AttrSize is the perf_event_attr size this build passes.
func AttrSize() uint32 { return attrSize }
