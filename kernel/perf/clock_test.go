package perf

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
)

// commStamp opens a dummy event of the calling thread whose COMM records
// carry their time, on CLOCK_MONOTONIC where mono, else on perf's clock.
func commStamp(t *testing.T, mono bool) func() uint64 {
	t.Helper()
	u := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY, Size: attrSize,
		Sample_type: unix.PERF_SAMPLE_TIME, Bits: unix.PerfBitComm | 1<<18}
	if mono {
		u.Bits |= unix.PerfBitUseClockID
		u.Clockid = unix.CLOCK_MONOTONIC
	}
	fd, err := unix.PerfEventOpen(&u, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	r, err := perfring.Open(fd, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return func() uint64 {
		var stamp uint64
		r.Read(func(rec []byte) bool {
			if h, _ := perfrecord.ParseHeader(rec); h.Type == perfrecord.TypeComm {
				stamp = binary.LittleEndian.Uint64(rec[len(rec)-8:])
			}
			return true
		})
		return stamp
	}
}

// TestClockOffset: the offset maps perf's clock onto CLOCK_MONOTONIC: the
// kernel stamps one rename's COMM record for two events, one on each
// clock, and perf's stamp plus the offset is the monotonic one, to within
// the offset's own uncertainty and what may part the two stamps (the
// offset is 18 ms on this project's VMs: far outside).
func TestClockOffset(t *testing.T) {
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	perfClock, monotonic := commStamp(t, false), commStamp(t, true)
	offset, within, err := ClockOffset()
	if err != nil {
		t.Fatal(err)
	}
	var name [16]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	p, m := perfClock(), monotonic()
	if p == 0 || m == 0 {
		t.Fatalf("COMM stamps: perf clock %d, monotonic %d", p, m)
	}
	off := time.Duration(int64(p) + offset - int64(m))
	t.Logf("CLOCK_MONOTONIC − perf clock = %v (± %v); the rename's stamps: %d and %d, %v apart after the offset", time.Duration(offset), within, p, m, off)
	// The two stamps are taken in one pass over the thread's events with
	// preemption off; an interrupt between them can still part them.
	if off.Abs() > within+200*time.Microsecond {
		t.Errorf("perf stamp + offset − monotonic stamp = %v, beyond the offset's ± %v", off, within)
	}
}
