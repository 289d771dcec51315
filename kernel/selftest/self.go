package selftest

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// ThreadCounters count the calling thread's own CPU time (task-clock,
// always) and, where the PMU counts them, its instructions and cycles
// (Zapanuks et al. §2.4: the exporter's own perturbation, per read cycle).
// The caller's goroutine must stay locked to its OS thread.
type ThreadCounters struct {
	fds [3]int // task-clock, instructions, cycles (-1: not counted here)
}

// ThreadSample is a reading: task-clock ns, and instructions and cycles
// where Has says they are counted.
type ThreadSample struct {
	TaskClock, Instructions, Cycles uint64
	HasInstructions, HasCycles      bool
}

// OpenThreadCounters opens the counters on the calling thread.
func OpenThreadCounters() (*ThreadCounters, error) {
	t := &ThreadCounters{fds: [3]int{-1, -1, -1}}
	specs := []eventspec.Attr{
		{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK},
		{Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_INSTRUCTIONS},
		{Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_CPU_CYCLES},
	}
	for i, a := range specs {
		u := perf.Attr(a)
		u.Read_format = 0
		u.Bits |= unix.PerfBitExcludeHv
		fd, err := perf.OpenFD(&u, 0, -1, -1, 0)
		if err != nil {
			if i == 0 {
				return nil, perf.NewOpenError("task-clock", -1, err)
			}
			continue // no PMU: CPU time alone
		}
		t.fds[i] = fd
	}
	return t, nil
}

// Read reads the counters.
func (t *ThreadCounters) Read() (ThreadSample, error) {
	var s ThreadSample
	var vals [3]uint64
	for i, fd := range t.fds {
		if fd < 0 {
			continue
		}
		var b [8]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			return s, fmt.Errorf("reading the exporter's own counters: %w", err)
		}
		vals[i] = *(*uint64)(unsafe.Pointer(&b))
	}
	s.TaskClock, s.Instructions, s.Cycles = vals[0], vals[1], vals[2]
	s.HasInstructions, s.HasCycles = t.fds[1] >= 0, t.fds[2] >= 0
	return s, nil
}

// Close closes them.
func (t *ThreadCounters) Close() {
	for _, fd := range t.fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// NullReads calibrates what one read costs (Zapanuks et al.'s null
// benchmark, notes §2.4 rule 4b): a group like the exporter's, counting
// system-wide on cpu, read back to back n times by a thread bound to that
// CPU; the duration of each read(2).
func NullReads(cpu, n int, attrs []eventspec.Attr, names []string) ([]time.Duration, error) {
	if n <= 0 {
		return nil, errors.New("null reads: n must be positive")
	}
	var out []time.Duration
	var err error
	rerr := runOn(cpu, func() {
		var g *perf.Group
		if g, err = perf.OpenGroup(attrs, names, perf.SystemWide(cpu)); err != nil {
			return
		}
		defer g.Close()
		vals := make([]uint64, g.Len())
		out = make([]time.Duration, 0, n)
		var enabled0, enabled uint64
		if enabled0, _, err = g.Read(vals); err != nil {
			return
		}
		start := time.Now()
		var last time.Time
		for range n {
			last = time.Now()
			if enabled, _, err = g.Read(vals); err != nil {
				return
			}
			out = append(out, time.Since(last))
		}
		// Reads of events the CPU's going offline stopped cost less.
		err = counted(cpu, time.Duration(enabled-enabled0), last.Sub(start))
	})
	if rerr != nil {
		return nil, rerr
	}
	return out, offline(cpu, err)
}

// ErrCPUWentOffline says the CPU a measurement counted on went offline
// during it: the kernel stopped its events for good and moved the thread
// bound there, so the counts are not the measurement's. Measure again on
// an online CPU.
var ErrCPUWentOffline = errors.New("the CPU went offline during the measurement")

// offline adds ErrCPUWentOffline to err where a group read found the group
// broken up, as the kernel leaves every group of a CPU going offline.
func offline(cpu int, err error) error {
	if errors.Is(err, perf.ErrGroupBroken) && !errors.Is(err, ErrCPUWentOffline) {
		return fmt.Errorf("CPU %d: %w: %w", cpu, ErrCPUWentOffline, err)
	}
	return err
}

// counted checks that a group pinned to cpu stayed enabled for wall, a time
// that lies between two reads (taken after the first returned and before
// the second was made, so that the reader being preempted next to a read
// only makes enabled longer), within a millisecond, which it does unless
// the CPU went offline. Taken around the reads instead, the clock ran 9.5
// ms past the enabled time on a busy machine and said that CPU 0, which
// cannot go offline here, had: most likely the reader held off (preempted,
// or waiting for a GC stop) between its last read and the clock.
func counted(cpu int, enabled, wall time.Duration) error {
	if enabled+time.Millisecond < wall {
		return fmt.Errorf("CPU %d: counted %v of %v: %w", cpu, enabled, wall, ErrCPUWentOffline)
	}
	return nil
}

// Perturbation is what reading a group adds to what a CPU counts (notes
// §2.4 rule 4c): per event, the counts over the same window with a reader
// on that CPU reading every fast and every slow, and the difference per
// extra read.
type Perturbation struct {
	Event          string
	Fast, Slow     uint64 // counts over the window
	FastReads      int
	SlowReads      int
	PerExtraRead   float64
	Window         time.Duration
	FastT, SlowT   time.Duration
	ReaderSwitches [2]uint64 // the reader thread's own context switches, fast and slow
}

// MeasurePerturbation counts attrs system-wide on cpu over window twice,
// with a reader thread bound to cpu reading a group like the exporter's
// (the same attrs) every fast, then every slow; fast first, then slow.
func MeasurePerturbation(ctx context.Context, cpu int, attrs []eventspec.Attr, names []string, window, fast, slow time.Duration) ([]Perturbation, error) {
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	run := func(every time.Duration) (counts []uint64, reads int, switches uint64, err error) {
		rerr := runOn(cpu, func() {
			measured, e := perf.OpenGroup(attrs, names, perf.SystemWide(cpu))
			if e != nil {
				err = e
				return
			}
			defer measured.Close()
			reader, e := perf.OpenGroup(attrs, names, perf.SystemWide(cpu))
			if e != nil {
				err = e
				return
			}
			defer reader.Close()
			own := perf.Attr(eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES})
			own.Read_format = 0
			ownFD, e := perf.OpenFD(&own, 0, -1, -1, 0)
			if e != nil {
				err = perf.NewOpenError("context-switches", -1, e)
				return
			}
			defer unix.Close(ownFD)
			before := make([]uint64, measured.Len())
			after := make([]uint64, measured.Len())
			scratch := make([]uint64, reader.Len())
			enabled0, _, e := measured.Read(before)
			if err = e; err != nil {
				return
			}
			start := time.Now()
			end := time.Now().Add(window)
			for next := time.Now().Add(every); next.Before(end); next = next.Add(every) {
				if !sleep(time.Until(next)) {
					err = ctx.Err()
					return
				}
				if _, _, err = reader.Read(scratch); err != nil {
					return
				}
				reads++
			}
			if !sleep(time.Until(end)) {
				err = ctx.Err()
				return
			}
			stop := time.Now()
			enabled1, _, e := measured.Read(after)
			if err = e; err != nil {
				return
			}
			if err = counted(cpu, time.Duration(enabled1-enabled0), stop.Sub(start)); err != nil {
				return
			}
			var b [8]byte
			unix.Read(ownFD, b[:])
			switches = *(*uint64)(unsafe.Pointer(&b))
			for i := range after {
				counts = append(counts, after[i]-before[i])
			}
		})
		if rerr != nil {
			err = rerr
		}
		return
	}
	fc, fr, fs, err := run(fast)
	if err != nil {
		return nil, offline(cpu, err)
	}
	sc, sr, ss, err := run(slow)
	if err != nil {
		return nil, offline(cpu, err)
	}
	var out []Perturbation
	for i := range fc {
		p := Perturbation{Event: names[i], Fast: fc[i], Slow: sc[i], FastReads: fr, SlowReads: sr, Window: window, FastT: fast, SlowT: slow,
			ReaderSwitches: [2]uint64{fs, ss}}
		if fr > sr {
			p.PerExtraRead = (float64(fc[i]) - float64(sc[i])) / float64(fr-sr)
		}
		out = append(out, p)
	}
	return out, nil
}

// Multiplexed counts attr system-wide on cpu over window, once pinned
// (it holds a counter all the time) and in copies more groups of its own
// than the CPU has counters left, so that the kernel multiplexes them;
// the pinned count and each copy's reading, for the analysis (validate.MultiplexError).
// Software events never multiplex: this needs a PMU.
func Multiplexed(ctx context.Context, cpu int, attr eventspec.Attr, name string, copies int, window time.Duration) (uint64, []model.Reading, error) {
	var pinned uint64
	var out []model.Reading
	var err error
	rerr := runOn(cpu, func() {
		pa := attr
		pa.Pinned = true
		var p *perf.Group
		if p, err = perf.OpenGroup([]eventspec.Attr{pa}, []string{name + " (pinned)"}, perf.SystemWide(cpu)); err != nil {
			return
		}
		defer p.Close()
		var groups []*perf.Group
		defer func() {
			for _, g := range groups {
				g.Close()
			}
		}()
		for i := range copies {
			g, e := perf.OpenGroup([]eventspec.Attr{attr}, []string{fmt.Sprintf("%s (copy %d)", name, i+1)}, perf.SystemWide(cpu))
			if e != nil {
				err = e
				return
			}
			groups = append(groups, g)
		}
		t := time.NewTimer(window)
		defer t.Stop()
		select {
		case <-ctx.Done():
			err = ctx.Err()
			return
		case <-t.C:
		}
		v := make([]uint64, 1)
		if _, _, err = p.Read(v); err != nil {
			return
		}
		pinned = v[0]
		for _, g := range groups {
			en, run, e := g.Read(v)
			if e != nil {
				err = e
				return
			}
			out = append(out, model.Reading{Count: v[0], Enabled: en, Running: run})
		}
	})
	if rerr != nil {
		return 0, nil, rerr
	}
	return pinned, out, err
}
