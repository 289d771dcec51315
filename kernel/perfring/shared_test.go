package perfring

import (
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

const sharedType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_ID | unix.PERF_SAMPLE_CPU

// openShared samples page-faults and minor-faults of this thread into one
// buffer (PERF_EVENT_IOC_SET_OUTPUT), as perf record and perf mem share a
// buffer between events; it returns both fds, their ids and the ring.
func openShared(t *testing.T, pages int) ([2]int, [2]uint64, *Ring) {
	t.Helper()
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	var fds [2]int
	var ids [2]uint64
	for i, cfg := range []uint64{unix.PERF_COUNT_SW_PAGE_FAULTS, unix.PERF_COUNT_SW_PAGE_FAULTS_MIN} {
		attr := unix.PerfEventAttr{
			Type: unix.PERF_TYPE_SOFTWARE, Config: cfg, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: 1, Sample_type: sharedType, Bits: unix.PerfBitDisabled | 1<<18, // sample_id_all
		}
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			t.Fatalf("perf_event_open(software %d): %v", cfg, err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		var id uint64
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id))); e != 0 {
			t.Fatalf("PERF_EVENT_IOC_ID: %v", e)
		}
		fds[i], ids[i] = fd, id
	}
	r, err := Open(fds[0], pages)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := unix.IoctlSetInt(fds[1], unix.PERF_EVENT_IOC_SET_OUTPUT, fds[0]); err != nil {
		t.Fatalf("PERF_EVENT_IOC_SET_OUTPUT: %v", err)
	}
	return fds, ids, r
}

// TestSharedBuffer: each sample is attributed to the event that wrote it
// by its id, and each event's samples equal the kernel's count of it.
func TestSharedBuffer(t *testing.T) {
	fds, ids, r := openShared(t, 64)
	ev, err := perfrecord.NewEvents([]perfrecord.Attr{{SampleType: sharedType, SampleIDAll: true}, {SampleType: sharedType, SampleIDAll: true}},
		[][]uint64{{ids[0]}, {ids[1]}})
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	}
	_, addrs := touch(t, 100)
	for _, fd := range fds {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	var per [2]uint64
	seen := [2]map[uint64]bool{{}, {}}
	var s perfrecord.Sample
	if _, err := r.Read(func(rec []byte) bool {
		h, _ := perfrecord.ParseHeader(rec)
		if h.Type != perfrecord.TypeSample {
			return true
		}
		i, err := ev.ForSample(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := perfrecord.DecodeSample(rec, &ev.Layouts[i], &s); err != nil {
			t.Fatal(err)
		}
		if s.ID != ids[i] {
			t.Errorf("sample of event %d carries id %d, want %d", i, s.ID, ids[i])
		}
		per[i]++
		seen[i][s.Addr] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for i, fd := range fds {
		if got := count(t, fd); per[i] != got || got < uint64(len(addrs)) {
			t.Errorf("event %d: %d samples in the shared buffer, the kernel counted %d (test touched %d pages)", i, per[i], got, len(addrs))
		}
		for _, a := range addrs {
			if !seen[i][a] {
				t.Errorf("event %d: no sample at touched %#x", i, a)
			}
		}
	}
}

// TestSharedBufferLost: in an overflowing shared buffer the LOST records
// carry a sample_id trailer naming one of the events, and samples of both
// plus lost equal the kernel's two counts.
func TestSharedBufferLost(t *testing.T) {
	fds, ids, r := openShared(t, 1)
	layout := perfrecord.Layout{SampleType: sharedType, SampleIDAll: true}
	ev, err := perfrecord.NewEvents([]perfrecord.Attr{{SampleType: sharedType, SampleIDAll: true}, {SampleType: sharedType, SampleIDAll: true}},
		[][]uint64{{ids[0]}, {ids[1]}})
	if err != nil {
		t.Fatal(err)
	}
	var samples, lost uint64
	read := func() {
		if _, err := r.Read(func(rec []byte) bool {
			h, _ := perfrecord.ParseHeader(rec)
			switch h.Type {
			case perfrecord.TypeSample:
				samples++
			case perfrecord.TypeLost:
				l, err := perfrecord.DecodeLost(rec)
				if err != nil {
					t.Fatal(err)
				}
				lost += l.Lost
				i, err := ev.ForRecord(rec)
				sid, serr := perfrecord.DecodeSampleID(rec, layout)
				if err != nil || serr != nil || sid.ID != ids[i] || sid.TID != uint32(unix.Gettid()) {
					t.Errorf("LOST trailer %+v (event %d): %v %v", sid, i, err, serr)
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, fd := range fds {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	}
	touch(t, 500)
	read()
	touch(t, 1) // the LOST record is written when a record next finds room
	for _, fd := range fds {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	read()
	if lost == 0 {
		t.Fatal("no LOST record")
	}
	if want := count(t, fds[0]) + count(t, fds[1]); samples+lost != want {
		t.Errorf("%d samples + %d lost, the kernel counted %d", samples, lost, want)
	}
}
