package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/collectors/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/collectors/perfsample"
	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
	"github.com/pmu-exporter/pmu_exporter/comm/samplestat"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// commFlags are the comm collector's options.
type commFlags struct {
	period    uint64 // ns of CPU time between samples, per CPU
	window    int
	budget    float64
	perCgroup bool
	cgroups   []string // sample only these cgroups' tasks (perf's cgroup mode)
}

// liveComm runs the address sampler: cpu-clock in user mode on every CPU
// with the user registers, each sample resolved to the access its
// instruction makes, feeding ComDetective's detector (/debug/comm and
// pmu_comm_*) and, where no precise PMU feeds one, the shared-line table
// (/debug/cachelines and pmu_sampling_*).
func liveComm(b *build) error {
	p, o := b.p, b.f.comm
	det := comdetect.New(comdetect.Options{Window: o.window})
	dec, err := perfsample.NewDecoder(b.f.procfs, det)
	if err != nil {
		return err
	}
	if doms, err := host.LLCDomains(b.f.sysfs, b.s.facts.OnlineCPUs); err != nil {
		b.log.Warn("communication not folded by last-level cache", "err", err)
	} else {
		dec.SetDomains(doms)
	}
	root, _ := cgroupRoot(b.f.cgroups, *b.s)
	perCgroup := o.perCgroup && root != ""
	cfg := sampling.Decoded(o.period, perCgroup, memop.RegsMask(runtime.GOARCH))
	stats := samplestat.New(1, b.f.sampling.maxLines)
	stats.SetSharingWindow(b.f.sampling.sharingWindow)
	if perCgroup {
		stats.TrackCgroups(b.f.cgroups.maxSeries)
	}
	// One sampler on every CPU, or one per selected cgroup (perf's cgroup
	// mode: only their tasks are sampled, and cost nothing elsewhere).
	targets := []string{""}
	if len(o.cgroups) > 0 {
		if root == "" {
			return errors.New("--collector.comm.cgroup: no cgroup hierarchy holds the perf_event controller")
		}
		targets = o.cgroups
	}
	var smps []*perfsample.Sampler
	for _, target := range targets {
		opts := perfsample.Options{
			Logger: b.log, OnlineCPUs: b.online.Read, Pages: b.f.sampling.pages, Poll: 100 * time.Millisecond, Govern: 500 * time.Millisecond,
			Governor:  sampling.NewGovernor(o.budget/float64(len(targets)), b.s.facts.MaxSampleRate),
			AfterRead: func(took time.Duration, _ int) { p.health.Observe("comm", took, nil) },
			Decoder:   dec,
		}
		if target != "" {
			f, err := os.Open(filepath.Join(root, target))
			if err != nil {
				return fmt.Errorf("--collector.comm.cgroup: %w", err)
			}
			p.closers = append(p.closers, func() { f.Close() })
			opts.Cgroup = f
		}
		smp, failures, err := perfsample.Open([]sampling.Config{cfg}, b.s.facts.OnlineCPUs, stats, opts)
		for _, fl := range failures {
			b.log.Warn("address sampler not opened on a CPU", "cpu", fl.CPU, "cgroup", target, "err", fl.Err)
		}
		if err != nil {
			return fmt.Errorf("address sampler: %w", err)
		}
		smps = append(smps, smp)
		p.closers = append(p.closers, func() { smp.Close() })
		p.cpuResets = append(p.cpuResets, smp.ResetCPU)
	}
	b.log.Info("address sampler", "event", "cpu-clock:u", "period_ns", o.period, "window", det.Window(), "cgroups", len(o.cgroups))
	coll := exporter.NewComm(dec).WithPeriods(func() []uint64 {
		out := make([]uint64, len(smps))
		for i, smp := range smps {
			out[i] = smp.Period(0)
		}
		return out
	})
	var cgNames *cgroupNames
	if perCgroup {
		cgNames = &cgroupNames{r: cgroupid.New(root), gone: map[uint64]time.Time{}}
		coll.PerCgroup(stats, cgNames, b.names)
	}
	p.collectors = append(p.collectors, coll)
	if !p.hasHandler("/debug/cachelines") { // no precise sampler: this one feeds the table
		p.collectors = append(p.collectors, exporter.NewSampling(smps[0], stats))
		p.handlers = append(p.handlers, Handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, func() func(uint32, uint64) string { return nil })})
	}
	p.handlers = append(p.handlers, Handler{"/debug/comm", "Communication matrices (?pid=N, ?pod=NAME)", commHandler(dec, podOfPID(b.f.procfs, b.names))})
	p.beside = append(p.beside, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			forgetExited(ctx, dec, b.f.procfs)
		}()
		if cgNames != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cgNames.sweepEvery(ctx, stats, b.f.cgroups.grace)
			}()
		}
		for _, smp := range smps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := smp.Run(ctx); err != nil {
					b.log.Error("address sampler stopped", "err", err)
					p.health.Observe("comm", 0, err)
				}
			}()
		}
		wg.Wait()
	})
	return nil
}

// forgetExited drops, every minute, the matrices of processes that exited.
func forgetExited(ctx context.Context, dec *perfsample.Decoder, proc string) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var gone []uint32
		dec.View(func(det *comdetect.Detector, _ [memop.NumReasons]uint64, _ [2]uint64) {
			for _, pid := range det.PIDs() {
				if _, err := os.Stat(filepath.Join(proc, strconv.Itoa(int(pid)))); errors.Is(err, os.ErrNotExist) {
					gone = append(gone, pid)
				}
			}
		})
		for _, pid := range gone {
			dec.Exited(pid)
		}
	}
}

// podOfPID names the pod of a process from its cgroups (/proc/PID/cgroup):
// "namespace/pod" where the API names it, else the pod's UID; "" outside
// pods.
func podOfPID(proc string, names exporter.PodNames) func(pid uint32) []string {
	fs, err := procfs.NewFS(proc)
	return func(pid uint32) []string {
		if err != nil {
			return nil
		}
		p, err := fs.Proc(int(pid))
		if err != nil {
			return nil
		}
		cgs, err := p.Cgroups()
		if err != nil {
			return nil
		}
		for _, cg := range cgs {
			id, ok := podcgroup.Parse(cg.Path)
			if !ok {
				continue
			}
			out := []string{id.PodUID}
			if names != nil {
				if ns, pod, _, ok := names.Names(id); ok {
					out = append(out, pod, ns+"/"+pod)
				}
			}
			return out
		}
		return nil
	}
}

// commHandler serves the matrices as `pmu_exporter comm --format json`
// prints them; ?pid=N keeps one process, ?pod= the processes of a pod
// (its name, namespace/name or UID).
func commHandler(dec *perfsample.Decoder, podOf func(pid uint32) []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var pid uint64
		if v := r.URL.Query().Get("pid"); v != "" {
			var err error
			if pid, err = strconv.ParseUint(v, 10, 32); err != nil || pid == 0 {
				http.Error(w, "pid: want a process id, got "+strconv.Quote(v), http.StatusBadRequest)
				return
			}
		}
		n := 10
		if v := r.URL.Query().Get("lines"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 0 || k > 1000 {
				http.Error(w, "lines: want a number from 0 to 1000, got "+strconv.Quote(v), http.StatusBadRequest)
				return
			}
			n = k
		}
		var ms []comdetect.Matrix
		dec.View(func(det *comdetect.Detector, _ [memop.NumReasons]uint64, _ [2]uint64) {
			ms = det.Report(uint32(pid), n)
		})
		if pod := r.URL.Query().Get("pod"); pod != "" {
			kept := ms[:0]
			for _, m := range ms {
				if slices.Contains(podOf(m.PID), pod) {
					kept = append(kept, m)
				}
			}
			ms = kept
		}
		rep := comdetect.JSON(ms, dec.Symbolize)
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	})
}
