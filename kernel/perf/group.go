// Package perf is the thin layer over perf_event_open(2): it opens an event group
// on one CPU (system-wide, or for one cgroup), reads the whole group with a single
// read(2), decodes the PERF_FORMAT_GROUP layout, and classifies the kernel's errors
// into reasons a person can act on. It keeps no state beyond the file descriptors
// and holds no policy: what to open, and what to do with the numbers, is decided by
// its callers.
package perf

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// ReadFormat is what every group reads: all members at once, with their ids and the
// group's enabled and running times, which scaling needs.
const ReadFormat = unix.PERF_FORMAT_GROUP | unix.PERF_FORMAT_ID |
	unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING

// attrSize is the perf_event_attr size this build passes (PERF_ATTR_SIZE_VER*).
var attrSize = uint32(unsafe.Sizeof(unix.PerfEventAttr{}))

// Attr converts an event's attributes to the kernel structure for counting.
func Attr(a eventspec.Attr) unix.PerfEventAttr {
	u := unix.PerfEventAttr{
		Type:        a.Type,
		Size:        attrSize,
		Config:      a.Config,
		Ext1:        a.Config1,
		Ext2:        a.Config2,
		Read_format: ReadFormat,
	}
	set := func(on bool, bit uint64) {
		if on {
			u.Bits |= bit
		}
	}
	set(a.ExcludeUser, unix.PerfBitExcludeUser)
	set(a.ExcludeKernel, unix.PerfBitExcludeKernel)
	set(a.ExcludeHV, unix.PerfBitExcludeHv)
	set(a.ExcludeHost, unix.PerfBitExcludeHost)
	set(a.ExcludeGuest, unix.PerfBitExcludeGuest)
	set(a.Pinned, unix.PerfBitPinned)
	set(a.PreciseIP&1 != 0, unix.PerfBitPreciseIPBit1)
	set(a.PreciseIP&2 != 0, unix.PerfBitPreciseIPBit2)
	return u
}

// Group is one open event group on one CPU.
type Group struct {
	CPU int
	fds []int
	ids []uint64 // kernel ids, in the order the events were given
	buf []byte
}

// Target says whose activity a group counts on its CPU: everything (CgroupFD < 0),
// or only tasks of the cgroup whose directory fd is CgroupFD.
type Target struct {
	CPU      int
	CgroupFD int
}

// SystemWide counts every task on cpu.
func SystemWide(cpu int) Target { return Target{CPU: cpu, CgroupFD: -1} }

// OpenGroup opens events as one group on t.CPU: the first is the leader, opened
// disabled; the group is enabled once complete so all members count the same span.
// names label the events in errors. On failure nothing stays open and the error is
// an *model.OpenError.
func OpenGroup(attrs []eventspec.Attr, names []string, t Target) (*Group, error) {
	if len(attrs) == 0 {
		return nil, errors.New("perf: empty group")
	}
	g := &Group{CPU: t.CPU, buf: make([]byte, 8*(3+2*len(attrs)))}
	pid, flags := -1, unix.PERF_FLAG_FD_CLOEXEC
	if t.CgroupFD >= 0 {
		pid, flags = t.CgroupFD, flags|unix.PERF_FLAG_PID_CGROUP
	}
	leader := -1
	for i, a := range attrs {
		u := Attr(a)
		if i == 0 {
			u.Bits |= unix.PerfBitDisabled
		}
		fd, err := unix.PerfEventOpen(&u, pid, t.CPU, leader, flags)
		if err != nil {
			g.Close()
			oe := &model.OpenError{Event: names[i], CPU: t.CPU, Err: err, Reason: classify(err)}
			if i > 0 && errors.Is(err, unix.EINVAL) && opensAlone(u, pid, t.CPU, flags) {
				oe.Reason = model.ReasonGroupDoesNotFit
				oe.GroupSize = len(attrs)
			}
			return nil, oe
		}
		if i == 0 {
			leader = fd
		}
		g.fds = append(g.fds, fd)
		id, err := ID(fd)
		if err != nil {
			g.Close()
			return nil, &model.OpenError{Event: names[i], CPU: t.CPU, Err: err, Reason: model.ReasonInvalid}
		}
		g.ids = append(g.ids, id)
	}
	if err := enableGroup(leader); err != nil {
		g.Close()
		return nil, &model.OpenError{Event: names[0], CPU: t.CPU, Err: err, Reason: classify(err)}
	}
	return g, nil
}

// opensAlone tells a group that cannot be scheduled together (EINVAL from the
// PMU's group validation) from an event the PMU rejects outright.
func opensAlone(u unix.PerfEventAttr, pid, cpu, flags int) bool {
	u.Bits |= unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&u, pid, cpu, -1, flags)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// FD is the file descriptor of event i, for consumers that read it themselves
// (the cgroup attribution program); it stays owned by the group.
func (g *Group) FD(i int) int { return g.fds[i] }

// Len is the number of events in the group.
func (g *Group) Len() int { return len(g.ids) }

// Read reads the whole group with one read(2) into values (len(values) must equal
// Len(), in the order the events were opened) and returns the group's cumulative
// enabled and running nanoseconds.
func (g *Group) Read(values []uint64) (enabled, running uint64, err error) {
	var n int
	for {
		n, err = unix.Read(g.fds[0], g.buf)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading group on CPU %d: %w", g.CPU, err)
	}
	return DecodeGroupRead(g.buf[:n], g.ids, values)
}

// ReadMembers reads a group the kernel broke up (ErrGroupBroken: its CPU
// went offline, and each member became a group of its own, its counts
// kept) one member at a time into values, and returns the leader's
// enabled and running nanoseconds, which the members shared until the
// break: the counts since the last Read are not lost with the group.
func (g *Group) ReadMembers(values []uint64) (enabled, running uint64, err error) {
	if len(values) != len(g.ids) {
		return 0, 0, fmt.Errorf("group read: %d value slots for %d events", len(values), len(g.ids))
	}
	tmp := make([]uint64, len(g.ids))
	for i, fd := range g.fds {
		var n int
		for {
			n, err = unix.Read(fd, g.buf)
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reading member %d of the group on CPU %d: %w", i, g.CPU, err)
		}
		e, r, err := DecodeGroupRead(g.buf[:n], g.ids[i:i+1], tmp[i:i+1])
		if err != nil {
			return 0, 0, fmt.Errorf("member %d of the group on CPU %d: %w", i, g.CPU, err)
		}
		if i == 0 {
			enabled, running = e, r
		}
	}
	copy(values, tmp)
	return enabled, running, nil
}

// Close closes every fd of the group; it is safe to call twice.
func (g *Group) Close() error {
	var errs []error
	for i := len(g.fds) - 1; i >= 0; i-- { // members before the leader
		if err := unix.Close(g.fds[i]); err != nil {
			errs = append(errs, err)
		}
	}
	g.fds = nil
	return errors.Join(errs...)
}
