package perfring

import (
	"encoding/binary"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

const sampleType = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD

// openFaults samples every page fault of the calling thread, with the
// faulting address; the caller has locked its goroutine to the thread.
func openFaults(t *testing.T) int {
	t.Helper()
	testenv.RequireRoot(t)
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_PAGE_FAULTS,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      1,
		Sample_type: sampleType,
		Bits:        unix.PerfBitDisabled,
		Wakeup:      1,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatalf("perf_event_open(page-faults, sample every fault): %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// touch writes one byte at offset 8 of each of n fresh pages and returns the
// addresses written, each a first touch and so one page fault.
func touch(t *testing.T, n int) ([]byte, []uint64) {
	t.Helper()
	page := os.Getpagesize()
	mem := testenv.FreshPages(t, n)
	addrs := make([]uint64, n)
	for i := range n {
		mem[i*page+8] = 1
		addrs[i] = uint64(uintptr(unsafe.Pointer(&mem[i*page+8])))
	}
	return mem, addrs
}

// openRing locks the test to its thread, samples its page faults and maps
// a ring of pages data pages.
func openRing(t *testing.T, pages int) (int, *Ring) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	fd := openFaults(t)
	r, err := Open(fd, pages)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return fd, r
}

// pollerOf is a poller watching r, closed when the test ends.
func pollerOf(t *testing.T, r *Ring) *Poller {
	t.Helper()
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Add(r); err != nil {
		t.Fatal(err)
	}
	return p
}

// drain reads every record, handing samples and LOST counts on.
func drain(t *testing.T, r *Ring, sample func(perfrecord.Sample), lost func(uint64)) {
	t.Helper()
	var s perfrecord.Sample
	if _, err := r.Read(func(rec []byte) bool {
		h, _ := perfrecord.ParseHeader(rec)
		switch h.Type {
		case perfrecord.TypeSample:
			if err := perfrecord.DecodeSample(rec, &perfrecord.Layout{SampleType: sampleType}, &s); err != nil {
				t.Fatal(err)
			}
			sample(s)
		case perfrecord.TypeLost:
			l, err := perfrecord.DecodeLost(rec)
			if err != nil {
				t.Fatal(err)
			}
			lost(l.Lost)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, fd int) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// TestPageFaultAddresses: every page the test touches comes back as a sample
// with that exact address, this thread's ids and period 1.
func TestPageFaultAddresses(t *testing.T) {
	fd, r := openRing(t, 64) // 256 KiB: room for every sample
	p := pollerOf(t, r)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	_, addrs := touch(t, 200)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	ready, err := p.Wait(1000)
	if err != nil || len(ready) != 1 {
		t.Fatalf("poll: %v ready, %v (wakeup after every sample)", len(ready), err)
	}
	seen := map[uint64]bool{}
	samples := 0
	drain(t, r, func(s perfrecord.Sample) {
		samples++
		if s.PID != uint32(os.Getpid()) || s.TID != uint32(unix.Gettid()) || s.Period != 1 || s.Time == 0 {
			t.Errorf("sample %+v: want pid %d tid %d period 1", s, os.Getpid(), unix.Gettid())
		}
		seen[s.Addr] = true
	}, func(uint64) { t.Error("LOST record from a buffer with room") })
	for _, a := range addrs {
		if !seen[a] {
			t.Errorf("no sample at %#x, a page the test touched", a)
		}
	}
	if got := count(t, fd); uint64(samples) != got {
		t.Errorf("%d samples read, the kernel counted %d faults", samples, got)
	}
}

// Peek sees the records Read would and leaves them: after two peeks,
// Read gets every record, the same ones, and a peek after it none.
func TestPeekLeavesRecords(t *testing.T) {
	fd, r := openRing(t, 64)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	touch(t, 50)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	sizes := func(read func(func([]byte) bool) (int, error)) []int {
		var out []int
		if _, err := read(func(rec []byte) bool { out = append(out, len(rec)); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, second := sizes(r.Peek), sizes(r.Peek)
	read := sizes(r.Read)
	if got := count(t, fd); uint64(len(read)) < got || !slices.Equal(first, second) || !slices.Equal(first, read) {
		t.Errorf("peeked %d and %d records, read %d, the kernel counted %d faults", len(first), len(second), len(read), got)
	}
	if after := sizes(r.Peek); len(after) != 0 {
		t.Errorf("peek after the read: %d records", len(after))
	}
}

// TestLostRecords: a one-page buffer that is not read while 1000 pages fault
// overflows; every fault the kernel counted is then either a sample read or
// in a LOST record.
func TestLostRecords(t *testing.T) {
	fd, r := openRing(t, 1)
	var samples, lost uint64
	onSample, onLost := func(perfrecord.Sample) { samples++ }, func(n uint64) { lost += n }
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	touch(t, 1000)
	drain(t, r, onSample, onLost)
	// The kernel writes the LOST record when the next record finds room.
	touch(t, 1)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	drain(t, r, onSample, onLost)
	if lost == 0 {
		t.Fatalf("no LOST record from a %d-byte buffer and 1000 faults (%d samples)", r.Size(), samples)
	}
	if got := count(t, fd); samples+lost != got {
		t.Errorf("%d samples + %d lost = %d, the kernel counted %d faults", samples, lost, samples+lost, got)
	}
}

// TestWrappedRecords: records that straddle the end of a small buffer come
// out whole (through the scratch copy) across many laps. The runtime may
// fault on this thread too (heap growth; under -race, the shadow of every
// page the test writes), at times enough to fill the page: a LOST record,
// which the kernel writes once the next record finds room, so in the round
// after, excuses both rounds if the kernel counted more faults in them than
// the test made, and fails the test otherwise.
func TestWrappedRecords(t *testing.T) {
	const rounds, perRound = 40, 20 // 40 × 20 samples of 56 bytes: 5 laps of 4 KiB
	fd, r := openRing(t, 1)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	got := map[uint64]bool{}
	var want, pending []uint64 // pending: the last round's, judged by the next
	excused, faults, lastFaults := 0, count(t, fd), uint64(0)
	round := func(n int) {
		_, addrs := touch(t, n)
		lost := uint64(0)
		drain(t, r, func(s perfrecord.Sample) { got[s.Addr] = true }, func(n uint64) { lost += n })
		before := faults
		faults = count(t, fd)
		made := uint64(len(pending) + n)
		switch span := lastFaults + faults - before; {
		case lost == 0:
			want = append(want, pending...)
		case span > made:
			excused++
			t.Logf("%d samples lost in two rounds in which this thread faulted %d times, %d of them the test's", lost, span, made)
		default:
			t.Errorf("%d samples lost in two rounds of %d faults, all the test's: read too late", lost, span)
		}
		pending, lastFaults = addrs, faults-before
	}
	for range rounds {
		round(perRound)
	}
	round(1) // a LOST record from the last round comes out with this fault
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	if cap(r.scratch) == 0 {
		t.Error("no record wrapped: the test did not exercise the scratch copy")
	}
	if excused > rounds/4 {
		t.Errorf("%d of %d rounds lost samples to faults the test did not make: too few left to judge", excused, rounds)
	}
	for _, a := range want {
		if !got[a] {
			t.Errorf("sample at %#x lost or misread", a)
		}
	}
}

// A corrupt record (which no kernel writes, so the test lays out a ring's
// metadata page and data area in ordinary memory) ends that read with an
// error after the records before it, the ring drops what follows it up to
// data_head, and the records the "kernel" writes next are read as before.
func TestCorruptRecordIsDropped(t *testing.T) {
	page := os.Getpagesize()
	mem := make([]byte, 2*page)
	r := &Ring{mem: mem, meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])), data: mem[page:], mask: uint64(page - 1)}
	write := func(recs ...[]byte) {
		head := r.meta.Data_head
		for _, rec := range recs {
			for i, c := range rec {
				r.data[(head+uint64(i))&r.mask] = c
			}
			head += uint64(len(rec))
		}
		r.meta.Data_head = head
	}
	rec := func(v uint64) []byte { // a LOST record carrying v
		b := make([]byte, 24)
		binary.LittleEndian.PutUint32(b, perfrecord.TypeLost)
		binary.LittleEndian.PutUint16(b[6:], 24)
		binary.LittleEndian.PutUint64(b[16:], v)
		return b
	}
	bad := rec(2)
	binary.LittleEndian.PutUint16(bad[6:], 3) // size 3: no record is that small
	write(rec(1), bad, rec(3))
	var got []uint64
	collect := func(b []byte) bool { l, _ := perfrecord.DecodeLost(b); got = append(got, l.Lost); return true }
	n, err := r.Read(collect)
	if err == nil || n != 1 || !strings.Contains(err.Error(), "corrupt record") || len(got) != 1 || got[0] != 1 {
		t.Fatalf("read %d records %v, %v", n, got, err)
	}
	if r.meta.Data_tail != r.meta.Data_head {
		t.Errorf("tail %d, head %d: the rest was not dropped", r.meta.Data_tail, r.meta.Data_head)
	}
	write(rec(4), rec(5))
	got = nil
	if n, err := r.Read(collect); err != nil || n != 2 || got[0] != 4 || got[1] != 5 {
		t.Errorf("after the drop: %d records %v, %v", n, got, err)
	}
}

// A poller with no ring yet waits out its timeout rather than failing
// (epoll_wait refuses room for no events).
func TestPollerWithoutRings(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ready, err := p.Wait(10)
	if err != nil || len(ready) != 0 {
		t.Errorf("%v %v", ready, err)
	}
}

// A ring added while another goroutine waits is woken for; one removed
// meanwhile is not returned (the watchpoint reader waits while threads come
// and go; under -race this also checks that Add and Remove may run beside
// Wait).
func TestPollerAddRemoveDuringWait(t *testing.T) {
	fd, r := openRing(t, 8)
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	type result struct {
		ready []*Ring
		err   error
	}
	wait := func(ms int) chan result {
		c := make(chan result, 1)
		go func() {
			ready, err := p.Wait(ms)
			c <- result{ready, err}
		}()
		return c
	}
	waiting := wait(5000)
	time.Sleep(50 * time.Millisecond) // most likely in epoll_wait by now
	if err := p.Add(r); err != nil {
		t.Fatal(err)
	}
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	touch(t, 1)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	if got := <-waiting; got.err != nil || len(got.ready) != 1 || got.ready[0] != r {
		t.Fatalf("Wait gave %v, %v; want the ring added while it waited", got.ready, got.err)
	}
	// The touch may have faulted more than once (the race detector's
	// shadow pages too), each sample a wakeup: take them all first.
	for {
		drain(t, r, func(perfrecord.Sample) {}, func(uint64) {})
		if ready, err := p.Wait(0); err != nil || len(ready) == 0 {
			break
		}
	}
	// Removed while a wait is under way: that wait times out empty.
	waiting = wait(500)
	time.Sleep(50 * time.Millisecond)
	if err := p.Remove(r); err != nil {
		t.Fatal(err)
	}
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	touch(t, 1)
	unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	if got := <-waiting; got.err != nil || len(got.ready) != 0 {
		t.Fatalf("Wait gave %v, %v; want nothing from a removed ring", got.ready, got.err)
	}
}

// A ring whose thread exited is ready once, not on every Wait after: the
// kernel reports a dead task's event as hung up for as long as its fd is
// watched, and level-triggered, every Wait returned at once until the
// watchpoint engine's next listing closed it, so that under thread churn
// the trap reader spun (half a CPU).
func TestPollerQuietAfterThreadExit(t *testing.T) {
	testenv.RequireRoot(t)
	var tid int
	exit := make(chan struct{})
	for tid == 0 || tid == os.Getpid() { // the main thread never exits: the runtime wedges it instead
		if tid != 0 {
			close(exit)
			exit = make(chan struct{})
		}
		tids, done := make(chan int), exit
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			tids <- unix.Gettid()
			<-done
		}()
		tid = <-tids
	}
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: 1, Sample_type: sampleType, Wakeup: 1}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	r, err := Open(fd, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := pollerOf(t, r)
	close(exit)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); os.IsNotExist(err) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("thread %d did not exit", tid)
		}
	}
	ready, waits := 0, 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; waits++ {
		got, err := p.Wait(50)
		if err != nil {
			t.Fatal(err)
		}
		ready += len(got)
	}
	if ready > 1 {
		t.Errorf("the exited thread's ring was ready %d times in %d waits over 300 ms, want once", ready, waits)
	}
}
