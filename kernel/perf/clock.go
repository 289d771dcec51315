package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
)

// offsetTries is how many brackets ClockOffset takes, keeping the tightest.
const offsetTries = 5

// ClockOffset measures how far CLOCK_MONOTONIC is ahead of perf's own
// clock, the one that stamps the records of events opened without
// use_clockid (local_clock): an Arm SPE event's, whose records' timestamps
// the metadata page converts to that clock only. The kernel stamps a COMM
// record of the calling thread (renamed to its own name) between two
// readings of CLOCK_MONOTONIC; the offset is taken at their midpoint, and
// within is half the tightest bracket: how far it can be off. The two
// clocks drift apart (NTP slews CLOCK_MONOTONIC, not local_clock), so
// measure again now and then.
func ClockOffset() (offset int64, within time.Duration, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	u := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY, Size: attrSize,
		Sample_type: unix.PERF_SAMPLE_TIME, Bits: unix.PerfBitComm | 1<<18} // sample_id_all: the COMM record's time
	fd, err := unix.PerfEventOpen(&u, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return 0, 0, fmt.Errorf("clock offset: a dummy event on this thread: %w", err)
	}
	defer unix.Close(fd)
	ring, err := perfring.Open(fd, 1)
	if err != nil {
		return 0, 0, fmt.Errorf("clock offset: %w", err)
	}
	defer ring.Close()
	var name [16]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		return 0, 0, fmt.Errorf("clock offset: PR_GET_NAME: %w", err)
	}
	best := time.Duration(-1)
	for range offsetTries {
		var t0, t1 unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &t0); err != nil {
			return 0, 0, fmt.Errorf("clock offset: %w", err)
		}
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
			return 0, 0, fmt.Errorf("clock offset: PR_SET_NAME: %w", err)
		}
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &t1); err != nil {
			return 0, 0, fmt.Errorf("clock offset: %w", err)
		}
		stamp, ok := uint64(0), false
		if _, err := ring.Read(func(rec []byte) bool {
			if h, err := perfrecord.ParseHeader(rec); err == nil && h.Type == perfrecord.TypeComm && len(rec) >= 8+perfrecord.HeaderSize {
				// sample_id_all with TIME alone: the record's last 8 bytes.
				stamp, ok = binary.LittleEndian.Uint64(rec[len(rec)-8:]), true
			}
			return true
		}); err != nil {
			return 0, 0, fmt.Errorf("clock offset: %w", err)
		}
		if !ok {
			return 0, 0, errors.New("clock offset: the kernel wrote no COMM record for the thread's rename")
		}
		half := time.Duration(t1.Nano()-t0.Nano()) / 2
		if best < 0 || half < best {
			best, offset = half, t0.Nano()+int64(half)-int64(stamp)
		}
	}
	return offset, best, nil
}
