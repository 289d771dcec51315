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
	"strconv"
	"time"

	"github.com/pmu-exporter/pmu_exporter/collectors/perfsample"
	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/comm/memop"
	"github.com/pmu-exporter/pmu_exporter/comm/samplestat"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/sampling"
)

// commFlags are the comm collector's options.
type commFlags struct {
	period uint64 // ns of CPU time between samples, per CPU
	window int
	budget float64
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
	cfg := sampling.Decoded(o.period, false, memop.RegsMask(runtime.GOARCH))
	stats := samplestat.New(1, b.f.sampling.maxLines)
	stats.SetSharingWindow(b.f.sampling.sharingWindow)
	smp, failures, err := perfsample.Open([]sampling.Config{cfg}, b.s.facts.OnlineCPUs, stats, perfsample.Options{
		Logger: b.log, OnlineCPUs: b.online.Read, Pages: b.f.sampling.pages, Poll: 100 * time.Millisecond, Govern: 500 * time.Millisecond,
		Governor:  sampling.NewGovernor(o.budget, b.s.facts.MaxSampleRate),
		AfterRead: func(took time.Duration, _ int) { p.health.Observe("comm", took, nil) },
		Decoder:   dec,
	})
	for _, fl := range failures {
		b.log.Warn("address sampler not opened on a CPU", "cpu", fl.CPU, "err", fl.Err)
	}
	if err != nil {
		return fmt.Errorf("address sampler: %w", err)
	}
	b.log.Info("address sampler", "event", "cpu-clock:u", "period_ns", o.period, "window", det.Window())
	p.collectors = append(p.collectors, exporter.NewComm(dec))
	if !p.hasHandler("/debug/cachelines") { // no precise sampler: this one feeds the table
		p.collectors = append(p.collectors, exporter.NewSampling(smp, stats))
		p.handlers = append(p.handlers, Handler{"/debug/cachelines", "Shared cache lines", cachelinesHandler(stats, func() func(uint32, uint64) string { return nil })})
	}
	p.handlers = append(p.handlers, Handler{"/debug/comm", "Communication matrices (?pid=N)", commHandler(dec)})
	p.closers = append(p.closers, func() { smp.Close() })
	p.cpuResets = append(p.cpuResets, smp.ResetCPU)
	p.beside = append(p.beside, func(ctx context.Context) {
		go forgetExited(ctx, dec, b.f.procfs)
		if err := smp.Run(ctx); err != nil {
			b.log.Error("address sampler stopped", "err", err)
			p.health.Observe("comm", 0, err)
		}
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

// commHandler serves the matrices as `pmu_exporter comm --format json`
// prints them; ?pid=N keeps one process.
func commHandler(dec *perfsample.Decoder) http.Handler {
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
		rep := comdetect.JSON(ms, dec.Symbolize)
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	})
}
