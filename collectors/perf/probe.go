package perf

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Probe asks the kernel whether an event can be opened at all, on the calling
// thread (which needs no privilege beyond perf_event_paranoid <= 2), and closes it.
func Probe(a eventspec.Attr) error {
	u := Attr(a)
	u.Read_format = 0
	u.Bits |= unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
	fd, err := unix.PerfEventOpen(&u, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return &model.OpenError{Event: "probe", CPU: -1, Err: err, Reason: classify(err)}
	}
	return unix.Close(fd)
}

// hwBreakpointRW is HW_BREAKPOINT_R|HW_BREAKPOINT_W from linux/hw_breakpoint.h.
const hwBreakpointRW = 3

// ProbeBreakpoint asks whether a hardware watchpoint (PERF_TYPE_BREAKPOINT) can be
// set on the calling thread: an 8-byte read/write watch on a local variable.
func ProbeBreakpoint() error {
	var watched uint64
	u := unix.PerfEventAttr{
		Type:    unix.PERF_TYPE_BREAKPOINT,
		Size:    attrSize,
		Bp_type: hwBreakpointRW,
		Ext1:    uint64(uintptr(unsafe.Pointer(&watched))),
		Ext2:    8,
		Bits:    unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&u, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(&watched)
	if err != nil {
		return &model.OpenError{Event: "breakpoint", CPU: -1, Err: err, Reason: classify(err)}
	}
	return unix.Close(fd)
}

// ProbeCgroup asks whether events can be scoped to the cgroup whose directory fd
// is cgroupFD (cgroup v2, or v1's perf_event hierarchy) on cpu.
func ProbeCgroup(cgroupFD, cpu int) error {
	u := Attr(eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK})
	u.Read_format = 0
	u.Bits |= unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&u, cgroupFD, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC|unix.PERF_FLAG_PID_CGROUP)
	if err != nil {
		return &model.OpenError{Event: "cgroup cpu-clock", CPU: cpu, Err: err, Reason: classify(err)}
	}
	return unix.Close(fd)
}
