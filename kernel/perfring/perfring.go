// Package perfring reads a perf event's mmap'd ring buffer: the kernel
// appends records at data_head, the reader consumes them up to it and
// releases the space by advancing data_tail. data_head is loaded atomically
// before any record is read, and data_tail is stored atomically after the
// last one is done with, which is the ordering the kernel's protocol needs
// (perf_event_open(2), "mmap layout"). A record that wraps around the end
// of the buffer is copied into a scratch buffer, the only copy made; every
// other record is handed out as a view into the mapping, so reading
// allocates nothing per record. Poller waits on many rings with epoll, woken
// by the events' wakeup watermark.
package perfring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// Ring is one event's mapped buffer.
type Ring struct {
	fd      int
	mem     []byte
	meta    *unix.PerfEventMmapPage
	data    []byte
	mask    uint64
	scratch []byte

	// The AUX area, where MapAux mapped one: its mask, a scratch buffer
	// for chunks that wrap, and how far it has been released.
	aux        []byte
	auxMask    uint64
	auxScratch []byte
	auxTail    uint64
}

// Open maps pages data pages (a power of two) plus the metadata page of the
// sampling event fd. The fd stays the caller's.
func Open(fd, pages int) (*Ring, error) {
	if pages <= 0 || pages&(pages-1) != 0 {
		return nil, fmt.Errorf("ring of %d data pages: want a power of two", pages)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (pages+1)*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		err = fmt.Errorf("mmap of %d pages on perf fd %d: %w", pages+1, fd, err)
		if errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("%w: the rings exceed kernel.perf_event_mlock_kb and RLIMIT_MEMLOCK; raise either, grant CAP_IPC_LOCK, or use fewer ring pages", err)
		}
		return nil, err
	}
	meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))
	off, size := meta.Data_offset, meta.Data_size
	if size == 0 { // kernels before 4.1 leave them zero
		off, size = uint64(page), uint64(pages*page)
	}
	return &Ring{fd: fd, mem: mem, meta: meta, data: mem[off : off+size], mask: size - 1}, nil
}

// FD is the fd of the event whose ring this is (the one others SET_OUTPUT to).
func (r *Ring) FD() int { return r.fd }

// Size is the data area's size in bytes.
func (r *Ring) Size() int { return len(r.data) }

// Read hands every complete record written since the last Read to fn, in
// order, then releases their space. rec is valid only during the call.
// fn returning false stops early; the records after it stay for the next
// Read. A record whose header is corrupt (the kernel never writes one, and
// the data pages cannot be written from user space: only a kernel bug
// could make one) stops the read with an error, the records before it
// delivered; everything from it to data_head is dropped, as there is no
// telling where the next record starts, so that the following reads go on
// with what the kernel writes next rather than stalling on it.
func (r *Ring) Read(fn func(rec []byte) bool) (int, error) { return r.scan(fn, true) }

// Peek hands fn the records Read would, leaving them all for the next
// Read: a writer's own check of what came, without taking it from the
// reader.
func (r *Ring) Peek(fn func(rec []byte) bool) (int, error) { return r.scan(fn, false) }

func (r *Ring) scan(fn func(rec []byte) bool, consume bool) (int, error) {
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := r.meta.Data_tail // only this reader writes it
	n := 0
	var err error
	for tail < head {
		avail := head - tail
		if avail < perfrecord.HeaderSize {
			err = fmt.Errorf("ring: %d bytes left before data_head, less than a record header; dropped", avail)
			tail = head
			break
		}
		start := tail & r.mask
		var hb [perfrecord.HeaderSize]byte
		r.copyOut(hb[:], start)
		h, herr := perfrecord.ParseHeader(hb[:])
		if herr != nil || uint64(h.Size) > avail {
			err = fmt.Errorf("ring: corrupt record at offset %d: %v (size %d, %d bytes available); %d bytes dropped", start, herr, h.Size, avail, avail)
			tail = head
			break
		}
		size := uint64(h.Size)
		var rec []byte
		if start+size <= uint64(len(r.data)) {
			rec = r.data[start : start+size]
		} else { // wraps
			if cap(r.scratch) < int(size) {
				r.scratch = make([]byte, 0, 65536)
			}
			rec = r.scratch[:size]
			r.copyOut(rec, start)
		}
		more := fn(rec)
		tail += size
		n++
		if !more {
			break
		}
	}
	if consume {
		atomic.StoreUint64(&r.meta.Data_tail, tail)
	}
	return n, err
}

// copyOut copies len(dst) bytes starting at data offset start, wrapping.
func (r *Ring) copyOut(dst []byte, start uint64) {
	k := copy(dst, r.data[start:])
	copy(dst[k:], r.data)
}

// Close unmaps the buffer and its AUX area.
func (r *Ring) Close() error {
	if r.mem == nil {
		return nil
	}
	var err error
	if r.aux != nil {
		err = unix.Munmap(r.aux)
	}
	err = errors.Join(err, unix.Munmap(r.mem))
	r.mem, r.data, r.meta, r.aux = nil, nil, nil, nil
	return err
}

// MapAux maps an AUX area of pages pages (a power of two) after the data
// area, where an AUX event (Arm SPE, Intel PT) writes its trace, the data
// area then carrying the AUX records that say where each chunk of it is.
// It is mapped writable: the kernel then never overwrites data not yet
// released (ReleaseAux), and says it cut a chunk short instead
// (PERF_AUX_FLAG_TRUNCATED), disabling the event until it is enabled
// again.
func (r *Ring) MapAux(pages int) error {
	if pages <= 0 || pages&(pages-1) != 0 {
		return fmt.Errorf("AUX area of %d pages: want a power of two", pages)
	}
	if r.aux != nil {
		return errors.New("the ring has an AUX area already")
	}
	size := uint64(pages * os.Getpagesize())
	off := uint64(len(r.mem)) // the first page after the metadata and data pages
	r.meta.Aux_offset, r.meta.Aux_size = off, size
	aux, err := unix.Mmap(r.fd, int64(off), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		err = fmt.Errorf("mmap of a %d-page AUX area on perf fd %d: %w", pages, r.fd, err)
		switch {
		case errors.Is(err, unix.EOPNOTSUPP):
			err = fmt.Errorf("%w: the event's PMU writes no AUX area (only trace PMUs do: Arm SPE, Intel PT, CoreSight)", err)
		case errors.Is(err, unix.EPERM):
			err = fmt.Errorf("%w: the AUX areas exceed kernel.perf_event_mlock_kb and RLIMIT_MEMLOCK; raise either, grant CAP_IPC_LOCK, or use fewer AUX pages", err)
		}
		return err
	}
	r.aux, r.auxMask = aux, size-1
	r.auxTail = atomic.LoadUint64(&r.meta.Aux_tail)
	return nil
}

// Capability bits of the metadata page (cap_user_time_zero,
// cap_user_time_short).
const (
	capUserTimeZero  = 1 << 4
	capUserTimeShort = 1 << 5
)

// TimeConv is the kernel's conversion of the CPU's counter (the TSC, Arm's
// generic timer: what an SPE record's timestamp counts) to perf's clock,
// from the metadata page, as perf record copies it into TIME_CONV; false
// where the kernel offers none (cap_user_time_zero clear: sched_clock is
// not the counter's, as under KVM's clock). The page is read under its
// sequence lock, retried while the kernel updates it.
func (r *Ring) TimeConv() (perfdata.TimeConv, bool) {
	m := r.meta
	for {
		seq := atomic.LoadUint32(&m.Lock)
		if seq&1 != 0 { // an update in progress
			runtime.Gosched()
			continue
		}
		caps := atomic.LoadUint64(&m.Capabilities)
		tc := perfdata.TimeConv{
			Shift: uint64(m.Time_shift), Mult: uint64(m.Time_mult), Zero: atomic.LoadUint64(&m.Time_zero),
			Cycles: atomic.LoadUint64(&m.Time_cycles), Mask: atomic.LoadUint64(&m.Time_mask),
			CapUserTimeZero: caps&capUserTimeZero != 0, CapUserTimeShort: caps&capUserTimeShort != 0,
		}
		if atomic.LoadUint32(&m.Lock) == seq {
			return tc, tc.CapUserTimeZero
		}
	}
}

// AuxSize is the AUX area's size in bytes (0: none mapped).
func (r *Ring) AuxSize() int { return len(r.aux) }

// Aux is the chunk of AUX data an AUX record announced: size bytes from
// offset (the record's aux_offset, which runs on past the area's end and
// wraps). It is a view into the area, or a copy where the chunk wraps,
// valid until the next Aux; nil where no AUX area is mapped or the chunk
// is larger than the area (a corrupt record).
func (r *Ring) Aux(offset, size uint64) []byte {
	if r.aux == nil || size > uint64(len(r.aux)) {
		return nil
	}
	start := offset & r.auxMask
	if start+size <= uint64(len(r.aux)) {
		return r.aux[start : start+size]
	}
	if uint64(cap(r.auxScratch)) < size {
		r.auxScratch = make([]byte, size)
	}
	b := r.auxScratch[:size]
	k := copy(b, r.aux[start:])
	copy(b[k:], r.aux)
	return b
}

// ReleaseAux gives the kernel back the AUX area up to end (a chunk's
// offset + size): the space of every chunk before it, read or not, so
// that a chunk whose AUX record was lost (the data area was full) cannot
// hold the area. It never moves back.
func (r *Ring) ReleaseAux(end uint64) {
	if r.aux == nil || end <= r.auxTail {
		return
	}
	r.auxTail = end
	atomic.StoreUint64(&r.meta.Aux_tail, end)
}

// Poller waits until any of its rings has reached its wakeup watermark.
// One goroutine may Wait while others Add and Remove rings (a reader
// blocked on traps while threads come and go); Wait itself is not for two
// goroutines at once.
type Poller struct {
	epfd   int
	mu     sync.Mutex // guards rings
	rings  map[int32]*Ring
	events []unix.EpollEvent // Wait's own
}

// NewPoller makes an epoll instance.
func NewPoller() (*Poller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	return &Poller{epfd: fd, rings: map[int32]*Ring{}}, nil
}

// Add watches r. Edge-triggered: the kernel reports the event of a task
// that exited as hung up for as long as its fd is watched, and level-
// triggered every Wait returned at once until the ring was removed (under
// thread churn the watchpoint reader spun on such rings). Readiness for
// data is edge-like either way (perf's poll reports a wakeup once), and
// the readers drain every ring after each Wait.
func (p *Poller) Add(r *Ring) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(r.fd)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, r.fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add perf fd %d: %w", r.fd, err)
	}
	p.mu.Lock()
	p.rings[int32(r.fd)] = r
	p.mu.Unlock()
	return nil
}

// Remove stops watching r (before it is closed).
func (p *Poller) Remove(r *Ring) error {
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, r.fd, nil); err != nil {
		return fmt.Errorf("epoll_ctl del perf fd %d: %w", r.fd, err)
	}
	p.mu.Lock()
	delete(p.rings, int32(r.fd))
	p.mu.Unlock()
	return nil
}

// Wait blocks up to timeoutMS (-1: forever) and returns the rings that are
// ready to read (none on timeout). EINTR is a timeout, not an error.
func (p *Poller) Wait(timeoutMS int) ([]*Ring, error) {
	p.mu.Lock()
	// At least one: epoll_wait refuses maxevents 0 (EINVAL), but a watcher
	// whose threads come later must still wait.
	want := max(len(p.rings), 1)
	p.mu.Unlock()
	if len(p.events) != want {
		p.events = make([]unix.EpollEvent, want)
	}
	n, err := unix.EpollWait(p.epfd, p.events, timeoutMS)
	if errors.Is(err, unix.EINTR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("epoll_wait: %w", err)
	}
	out := make([]*Ring, 0, n)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range p.events[:n] {
		if r := p.rings[ev.Fd]; r != nil { // not removed meanwhile
			out = append(out, r)
		}
	}
	return out, nil
}

// Close closes the epoll instance (not the rings).
func (p *Poller) Close() error { return unix.Close(p.epfd) }
