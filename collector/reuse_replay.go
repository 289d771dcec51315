package collector

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/watchbudget"
	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
)

// replayReuse runs ReuseTracker over the access trace of --replay.trace
// (TID R|W 0xADDR SIZE a line, as `pmu_exporter reuse --trace` reads it)
// once at start, on the simulated debug registers of the trace harness,
// sampling each thread every --replay.trace-period accesses, and serves
// its outcomes as pmu_reuse_* with the distances in accesses, and where
// the trace gives each access its thread's CPU time (a fifth field) in
// that time too (clock thread_cpu, as live), as the cgroup
// "replay:" and the file's name, and its registers' arms and traps as
// pmu_comm_watchpoint_*; with miss ratios at the caches of
// --replay.samples' host where its HEADER_CACHE sizes them. With
// --replay.trap-cost, each run is governed as live (governed).
func replayReuse(b *build) error {
	path := b.f.replay.trace
	file, err := safeopen.Input("--replay.trace", path, safeopen.Trace, nil)
	if err != nil {
		return err
	}
	defer file.Close()
	gov, err := b.traceGovernor()
	if err != nil {
		return err
	}
	r := reuse.NewReplay(reuse.ReplayOptions{Options: reuse.Options{Seed: 1, Own: reuse.DefaultOwn, Clock: reuse.ClockAccesses}, Period: b.f.replay.tracePeriod, Governor: gov})
	if err := r.Run(bufio.NewReaderSize(file, 1<<16)); err != nil {
		return fmt.Errorf("--replay.trace: %w", err)
	}
	t := r.Tracker
	b.log.Info("replay trace", "file", path, "samples", t.Samples, "reuses", t.Reuses, "invalidations", t.Invalidations)
	view := replayedReuse{t}
	timedGov, _ := b.traceGovernor()
	if timed, err := traceTimed(path, b.f.replay.tracePeriod, timedGov); err != nil {
		return fmt.Errorf("--replay.trace: %w", err)
	} else if timed != nil {
		view = append(view, timed)
	} else {
		b.log.Info("replay trace: no distances in time", "reason", "its accesses carry no CPU time (TID R|W 0xADDR SIZE NS)")
	}
	rc := exporter.NewReuse(view, traceCgroup("replay:"+filepath.Base(path)), nil)
	if l1d, l2, llc, ok := recordedCacheSizes(b.f.replay.samples); ok {
		// Miss ratios at the recording host's caches, as live at this
		// host's: the trace stands for a workload of that host.
		rc.WithCaches(l1d, l2, llc)
		b.log.Info("replay trace: miss ratios at the caches of --replay.samples' host", "l1d", l1d, "l2", l2, "llc", llc)
	}
	b.p.add("comm", rc)
	// The simulated registers' totals, as live: every trap is
	// ReuseTracker's; the governor's where one governed them.
	watch := exporter.WatchStats{Traps: r.Traps, Reuse: r.Traps, Arms: r.Arms, ReuseThreads: len(r.Threads())}
	if gov != nil {
		tot := gov.Totals()
		watch.Limited, watch.Budget, watch.TrapCost = true, gov.Share(), gov.Cost()
		watch.CPU, watch.Cost, watch.Denied = tot.CPU, tot.Spent, tot.Denied
		b.log.Info("replay trace: governed", "budget", gov.Share(), "trap_cost", b.f.replay.trapCost, "traps", tot.Traps, "denied", tot.Denied)
	}
	b.p.add("comm", exporter.NewWatch(func() exporter.WatchStats { return watch }))
	return nil
}

// traceGovernor is the watchpoint governor of a trace replay, as live's
// (--collector.comm.watch-budget, watchbudget.Allowance) at
// --replay.trap-cost a trap; nil without a cost.
func (b *build) traceGovernor() (*watchbudget.Budget, error) {
	cost := b.f.replay.trapCost
	switch {
	case cost < 0:
		return nil, fmt.Errorf("--replay.trap-cost=%v: want a duration of 0 or more", cost)
	case cost == 0:
		return nil, nil
	case b.f.comm.watchBudget <= 0 || b.f.comm.watchBudget > 1:
		return nil, fmt.Errorf("--collector.comm.watch-budget=%v: want a share of CPU time in (0, 1]", b.f.comm.watchBudget)
	}
	return watchbudget.New(b.f.comm.watchBudget, cost.Seconds(), watchbudget.Allowance), nil
}

// replayedReuse are a trace's trackers, one per distance clock, fixed
// once run.
type replayedReuse []*reuse.Tracker

func (r replayedReuse) ReuseView(f func(pid uint32, cgroup uint64, t *reuse.Tracker)) {
	for _, t := range r {
		f(0, 0, t)
	}
}

// traceTimed replays the trace at path again on its threads' CPU time,
// where its first access gives one (nil where it does not), governed by
// gov where not nil; a later access without one is an error naming its
// line.
func traceTimed(path string, period uint64, gov *watchbudget.Budget) (*reuse.Tracker, error) {
	if timed, err := firstAccessTimed(path); err != nil || !timed {
		return nil, err
	}
	file, err := safeopen.Input("--replay.trace", path, safeopen.Trace, nil)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	r := reuse.NewReplay(reuse.ReplayOptions{Options: reuse.Options{Seed: 1, Own: reuse.DefaultOwn, Clock: reuse.ClockThreadCPU}, Period: period, Timed: true, Governor: gov})
	if err := r.Run(bufio.NewReaderSize(file, 1<<16)); err != nil {
		return nil, err
	}
	return r.Tracker, nil
}

// firstAccessTimed says whether a trace's first access has its fifth
// field, the thread's CPU time.
func firstAccessTimed(path string) (bool, error) {
	file, err := safeopen.Input("--replay.trace", path, safeopen.Trace, nil)
	if err != nil {
		return false, err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text != "" && !strings.HasPrefix(text, "#") {
			return len(strings.Fields(text)) == 5, nil
		}
	}
	return false, sc.Err()
}

// ArmLatency is none: the harness arms at once (or after --arm-delay
// accesses, which are not time).
func (r replayedReuse) ArmLatency() [reuse.Bins]uint64 { return [reuse.Bins]uint64{} }

// traceCgroup names the one cgroup of a replayed trace.
type traceCgroup string

func (c traceCgroup) Cgroup(uint64) (string, podcgroup.Identity, bool) {
	return string(c), podcgroup.Identity{}, true
}

// recordedCacheSizes are the L1 data, L2 and last-level cache sizes that
// the HEADER_CACHE of the perf.data file at path gives (0 for a level it
// does not size); ok is false without a file, a section or any size.
func recordedCacheSizes(path string) (l1d, l2, llc uint64, ok bool) {
	if path == "" {
		return 0, 0, 0, false
	}
	file, closeFile, err := recorded.Open(path, nil)
	if err != nil {
		return 0, 0, 0, false // replayComm says why
	}
	defer closeFile()
	top := uint32(0)
	for _, c := range file.Caches {
		if c.Type == "Instruction" {
			continue
		}
		size, err := host.ParseCacheSize(c.Size)
		if err != nil {
			continue
		}
		switch c.Level {
		case 1:
			l1d = size
		case 2:
			l2 = size
		}
		if c.Level > top {
			top, llc = c.Level, size
		}
	}
	return l1d, l2, llc, l1d+l2+llc > 0
}
