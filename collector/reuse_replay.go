package collector

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
)

// replayReuse runs ReuseTracker over the access trace of --replay.trace
// (TID R|W 0xADDR SIZE a line, as `pmu_exporter reuse --trace` reads it)
// once at start, on the simulated debug registers of the trace harness,
// sampling each thread every --replay.trace-period accesses, and serves
// its outcomes as pmu_reuse_* with the distances in accesses (the trace
// has no time), as the cgroup "replay:" and the file's name.
func replayReuse(b *build) error {
	path := b.f.replay.trace
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--replay.trace: %w", err)
	}
	defer file.Close()
	r := reuse.NewReplay(reuse.ReplayOptions{Options: reuse.Options{Seed: 1, Unit: reuse.UnitAccesses}, Period: b.f.replay.tracePeriod})
	if err := r.Run(bufio.NewReaderSize(file, 1<<16)); err != nil {
		return fmt.Errorf("--replay.trace: %w", err)
	}
	t := r.Tracker
	b.log.Info("replay trace", "file", path, "samples", t.Samples, "reuses", t.Reuses, "invalidations", t.Invalidations)
	b.p.collectors = append(b.p.collectors, exporter.NewReuse(replayedReuse{t}, traceCgroup("replay:"+filepath.Base(path)), nil))
	return nil
}

// replayedReuse is a trace's tracker, fixed once run.
type replayedReuse struct{ t *reuse.Tracker }

func (r replayedReuse) ReuseView(f func(pid uint32, cgroup uint64, t *reuse.Tracker)) { f(0, 0, r.t) }

// ArmLatency is none: the harness arms at once (or after --arm-delay
// accesses, which are not time).
func (r replayedReuse) ArmLatency() [reuse.Bins]uint64 { return [reuse.Bins]uint64{} }

// traceCgroup names the one cgroup of a replayed trace.
type traceCgroup string

func (c traceCgroup) Cgroup(uint64) (string, podcgroup.Identity, bool) {
	return string(c), podcgroup.Identity{}, true
}
