package selftest

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfring"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
)

// Sampler is a sampling event to judge on this thread's own work: the
// event, its period, and what each sample carries (PERF_SAMPLE_*; the
// user registers where RegsUser is not 0). Leader, when set, is opened
// first, counting, as the sampler's group leader (PEBS mem-loads on
// Sapphire Rapids and later); AuxPages, when not 0, maps an AUX area of
// that many pages (a power of two) for a sampler that writes its records
// there (Arm SPE).
type Sampler struct {
	Attr       eventspec.Attr
	Period     uint64
	SampleType uint64
	RegsUser   uint64
	Leader     *eventspec.Attr
	AuxPages   int
}

// SampledRun is what the sampler gave over the work, as the kernel wrote
// it: its samples (copies, decoded), the records the ring dropped (LOST)
// and the THROTTLE records, the event's own count over the work, and the
// thread's CPU time over it. Dropped are the samples the event's count
// says were due (count ÷ period) beyond those the ring holds and those a
// LOST record names: a ring that fills while nobody reads it drops
// samples with no LOST record after them. Enabled and Running are the
// event's times (they differ where it shared counters with others and was
// multiplexed: no samples while it was off). Aux is the AUX data the AUX
// records announced, in order (the sampler's record stream), and
// AuxTruncated how many of them said the area had filled.
type SampledRun struct {
	Samples          []perfrecord.Sample
	Lost             uint64
	Throttled        uint64
	Dropped          uint64
	Count            uint64
	Enabled, Running time.Duration
	CPUTime          time.Duration
	Aux              []byte
	AuxTruncated     uint64
	kept             int // samples the ring held, Samples' and beyond
}

// maxSampledRun bounds the samples one run keeps: the loops are sized to
// give far fewer.
const maxSampledRun = 1 << 16

// maxSampledAux bounds the AUX data one run keeps.
const maxSampledAux = 64 << 20

// Sample opens s on this thread (every CPU it runs on, user mode only
// where Attr says), runs work on the same locked thread with the event
// enabled around it alone, and returns what the ring holds. The ring has
// pages data pages (a power of two).
func Sample(s Sampler, pages int, work func()) (SampledRun, error) {
	var run SampledRun
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a := perf.Attr(s.Attr)
	a.Read_format = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING
	a.Sample = s.Period
	a.Sample_type = s.SampleType
	a.Sample_regs_user = s.RegsUser
	a.Bits |= unix.PerfBitDisabled
	group, control := -1, -1
	if s.Leader != nil {
		l := perf.Attr(*s.Leader)
		l.Bits |= unix.PerfBitDisabled
		lfd, err := perf.OpenFD(&l, 0, -1, -1, 0)
		if err != nil {
			return run, fmt.Errorf("open the sampler's group leader: %w", err)
		}
		defer perf.CloseFD(lfd)
		group, control = lfd, lfd
		a.Bits &^= unix.PerfBitDisabled // a member runs when its leader does
	}
	fd, err := perf.OpenFD(&a, 0, -1, group, 0)
	if err != nil {
		return run, fmt.Errorf("open the sampler: %w", err)
	}
	defer perf.CloseFD(fd)
	if control < 0 {
		control = fd
	}
	ring, err := perfring.Open(fd, pages)
	if err != nil {
		return run, err
	}
	defer ring.Close()
	if s.AuxPages > 0 {
		if err := ring.MapAux(s.AuxPages); err != nil {
			return run, err
		}
	}
	t0, err := perf.ThreadCPU()
	if err != nil {
		return run, err
	}
	if err := perf.Enable(control); err != nil {
		return run, err
	}
	work()
	if err := perf.Disable(control); err != nil {
		return run, err
	}
	t1, err := perf.ThreadCPU()
	if err != nil {
		return run, err
	}
	run.CPUTime = t1 - t0
	var b [24]byte
	if _, err := perf.ReadFD(fd, b[:]); err != nil {
		return run, fmt.Errorf("read the sampler's count: %w", err)
	}
	run.Count = binary.NativeEndian.Uint64(b[:])
	run.Enabled = time.Duration(binary.NativeEndian.Uint64(b[8:]))
	run.Running = time.Duration(binary.NativeEndian.Uint64(b[16:]))
	l := perfrecord.Layout{SampleType: s.SampleType, RegsUser: s.RegsUser}
	var smp perfrecord.Sample
	var decodeErr error
	ring.Read(func(rec []byte) bool {
		h, err := perfrecord.ParseHeader(rec)
		if err != nil {
			decodeErr = err
			return false
		}
		switch h.Type {
		case perfrecord.TypeSample:
			if err := perfrecord.DecodeSample(rec, &l, &smp); err != nil {
				decodeErr = err
				return false
			}
			run.kept++
			if len(run.Samples) < maxSampledRun {
				run.Samples = append(run.Samples, smp)
			}
		case perfrecord.TypeLost:
			if lost, err := perfrecord.DecodeLost(rec); err == nil {
				run.Lost += lost.Lost
			}
		case perfrecord.TypeThrottle:
			run.Throttled++
		case perfrecord.TypeAux:
			aux, err := perfrecord.DecodeAux(rec)
			if err != nil {
				decodeErr = err
				return false
			}
			if aux.Flags&perfrecord.AuxTruncated != 0 {
				run.AuxTruncated++
			}
			data := ring.Aux(aux.Offset, aux.Size)
			if data == nil {
				decodeErr = fmt.Errorf("AUX record of %d bytes at %d: more than the %d-byte area", aux.Size, aux.Offset, ring.AuxSize())
				return false
			}
			if len(run.Aux)+len(data) <= maxSampledAux {
				run.Aux = append(run.Aux, data...)
			}
		}
		return true
	})
	if decodeErr != nil {
		return run, fmt.Errorf("the sampler's records: %w", decodeErr)
	}
	if due, got := run.Count/s.Period, uint64(run.kept)+run.Lost; due > got {
		run.Dropped = due - got
	}
	return run, nil
}

// FreshMapping maps n fresh anonymous pages with huge pages off, so that
// each first write faults once; release unmaps them.
func FreshMapping(n int) (mem []byte, page int, release func(), err error) {
	page = unix.Getpagesize()
	mem, err = unix.Mmap(-1, 0, n*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("mmap %d pages: %w", n, err)
	}
	unix.Madvise(mem, unix.MADV_NOHUGEPAGE) // one fault per page, not per 2 MiB
	return mem, page, func() { unix.Munmap(mem) }, nil
}

// UserAndKernel is work on both sides of the mode switch, the thesis's
// Exec-Mode loop: n rounds of a user-mode spin and a system call
// (getppid), so that a sampler of user mode alone has kernel time right
// beside every stretch of user time to misreport.
func UserAndKernel(n int) uint64 {
	var x uint64
	for range n {
		x += loops.SpinA(2_000)
		x += uint64(unix.Getppid())
	}
	return x
}
