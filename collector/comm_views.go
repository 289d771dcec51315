package collector

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
)

// forgetExited drops, every minute, what the decoder keeps of processes
// and threads that exited.
func forgetExited(ctx context.Context, dec *feed.Decoder, proc string) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sweepExited(dec, proc)
	}
}

// sweepExited forgets the processes and threads known to dec that proc
// no longer lists, then closes the files none of the rest maps. The
// decoder's lock is held only to list them, not while proc is read.
func sweepExited(dec *feed.Decoder, proc string) {
	known := map[uint32][]uint32{}
	dec.View(func(det *comdetect.Detector, _ memop.Outcomes) {
		for _, pid := range det.PIDs() {
			known[pid] = det.Threads(pid)
		}
	})
	gone := func(path string) bool {
		_, err := os.Stat(path)
		return errors.Is(err, os.ErrNotExist)
	}
	for pid, tids := range known {
		dir := filepath.Join(proc, strconv.Itoa(int(pid)))
		if gone(dir) {
			dec.Exited(pid)
			continue
		}
		var exited []uint32
		for _, tid := range tids {
			if gone(filepath.Join(dir, "task", strconv.Itoa(int(tid)))) {
				exited = append(exited, tid)
			}
		}
		if len(exited) > 0 {
			dec.ThreadsExited(pid, exited)
		}
	}
	dec.CloseIdleCode()
}

// commView is the detector as /debug/comm reads it, live or replayed.
type commView interface {
	View(f func(det *comdetect.Detector, out memop.Outcomes))
	Symbolize(pid uint32, ip uint64) string
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
func commHandler(dec commView, podOf func(pid uint32) []string) http.Handler {
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
		dec.View(func(det *comdetect.Detector, _ memop.Outcomes) {
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

// replayedComm is a recording's detector, fixed once read, and its
// communication between the recording host's last-level cache domains.
type replayedComm struct {
	det      *comdetect.Detector
	acc      *recorded.Accesses
	domainOf map[uint32]string // CPU -> its LLC's shared CPU list (HEADER_CACHE)
	domains  map[[2]string]*comdetect.Cell
}

// fold adds a detection between two CPUs to their LLC domains' pair, as
// live (feed.Decoder's foldDomains): only where the recording names both
// CPUs' caches, and they differ as CPUs.
func (r *replayedComm) fold(cpu uint32, found comdetect.Detection, period uint64) {
	if found.Kind == cacheline.NotShared || cpu == found.PeerCPU {
		return
	}
	a, okA := r.domainOf[cpu]
	b, okB := r.domainOf[found.PeerCPU]
	if !okA || !okB {
		return
	}
	if a > b {
		a, b = b, a
	}
	c := r.domains[[2]string{a, b}]
	if c == nil {
		c = &comdetect.Cell{}
		r.domains[[2]string{a, b}] = c
	}
	c.Add(period, found.Kind == cacheline.TrueSharing)
}

// llcOf maps each CPU to its last-level cache, named as live by its
// shared CPU list, from a recording's HEADER_CACHE; empty without one.
func llcOf(caches []perfdata.Cache) map[uint32]string {
	top := uint32(0)
	for _, c := range caches {
		top = max(top, c.Level)
	}
	out := map[uint32]string{}
	for _, c := range caches {
		if c.Level != top || c.Type == "Instruction" {
			continue
		}
		cpus, err := cpuset.Parse(c.SharedCPUs)
		if err != nil {
			continue
		}
		for _, cpu := range cpus {
			out[uint32(cpu)] = c.SharedCPUs
		}
	}
	return out
}

func (r *replayedComm) View(f func(det *comdetect.Detector, out memop.Outcomes)) {
	out := r.acc.Resolver.Outcomes()
	out.SymbolBytes, out.SymbolsRefused = r.acc.Code.Bytes(), r.acc.Code.Refused()
	f(r.det, out)
}

// Domains are the communication between the recording host's LLC
// domains, where its HEADER_CACHE names them (none otherwise).
func (r *replayedComm) Domains(f func(a, b string, c comdetect.Cell)) {
	for p, c := range r.domains {
		f(p[0], p[1], *c)
	}
}

func (r *replayedComm) Symbolize(pid uint32, ip uint64) string {
	return r.acc.Code.Symbolize(pid, ip).String()
}

// recordedCgroups names a recording's cgroup ids by its cgroup records'
// paths, with the pod and container those paths name.
type recordedCgroups map[uint64]string

func (c recordedCgroups) Cgroup(id uint64) (string, podcgroup.Identity, bool) {
	path, ok := c[id]
	if !ok {
		return "", podcgroup.Identity{}, false
	}
	ident, _ := podcgroup.Parse(path)
	return path, ident, true
}

// periodMean is the mean period of a recording's timer samples (cpu-clock
// or task-clock, in ns): the attr's fixed period (perf record -c), or the
// samples' own where it varies (-F).
type periodMean struct {
	sum float64
	n   uint64
}

func (p *periodMean) add(attr perfrecord.Attr, s *perfrecord.Sample) {
	if attr.Type != unix.PERF_TYPE_SOFTWARE || (attr.Config != unix.PERF_COUNT_SW_CPU_CLOCK && attr.Config != unix.PERF_COUNT_SW_TASK_CLOCK) {
		return
	}
	period := attr.SamplePeriod()
	if attr.SampleType&unix.PERF_SAMPLE_PERIOD != 0 {
		period = s.Period
	}
	p.sum += float64(period)
	p.n++
}
