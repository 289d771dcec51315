package collector

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// preciseThresholds bound the PMU samplers (PEBS, IBS): what the thesis
// found of them (docs/trust.md). Accuracy is against the event's own
// count, as the thesis measures it; PEBS held it within 1% with no
// spread, IBS op's general events within a few percent, so 5%. The
// sample's IP is the access (PEBS at precise_ip 2) or the instruction
// after it (IBS, PEBS at 1: Config.IPAfter), and its data address is the
// record's own, so both are held to 99%.
var preciseThresholds = sampler.Thresholds{Accuracy: 0.05, Stability: 0.02, Bias: 0.02, Attribution: 0.99, Address: 0.99, ModeLeak: 0, Loss: 0.01}

// precisePeriods are the periods the precise samplers are judged at: the
// exporter's default (--collector.sampling.period, prime) and a shorter
// and a longer one, all prime; each a multiple of 16 where the PMU needs it
// (IBS), rounded up.
var precisePeriods = []uint64{1009, 10007, 100003}

// preciseRuns judges a precise memory sampler of this host on its loop:
// SumLoads for a load sampler, StoreAll for a store sampler. A config
// that needs a group leader, or an AUX area (Arm SPE), is left out: the
// error says so.
func preciseRuns(plan samplerPlan, c sampling.Config) ([]sampler.Run, error) {
	if c.Leader != nil || c.Aux {
		return nil, fmt.Errorf("%s: the validation opens no group leader or AUX area yet", c.Name)
	}
	array := make([]uint64, 1<<16)
	lo := uint64(uintptr(unsafe.Pointer(&array[0])))
	stores := c.Name == "mem-stores"
	loop := funcName(loops.SumLoads)
	work := func() { loops.SumLoads(array, 64) }
	if stores {
		loop, work = funcName(loops.StoreAll), func() { loops.StoreAll(array, 64) }
	}
	var runs []sampler.Run
	for _, p := range precisePeriods {
		period := c.Align(p)
		for range plan.runs {
			got, err := selftest.Sample(selftest.Sampler{Attr: c.Attr, Period: period, SampleType: c.SampleType}, 64, work)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			runs = append(runs, preciseRun(period, got, loop, c.IPAfter, lo, lo+uint64(len(array))*8))
		}
	}
	return runs, nil
}

// preciseRun judges one run of a precise sampler: its events are the
// event's own count; a sample is attributed when its instruction (the one
// before its IP where the IP is the next one's) lies in loop; its address
// is right when it is an element of [lo, hi).
func preciseRun(period uint64, got selftest.SampledRun, loop string, ipAfter bool, lo, hi uint64) sampler.Run {
	r := sampler.Run{Period: period, Events: float64(got.Count), Samples: len(got.Samples), Lost: got.Lost + got.Dropped, Throttled: got.Throttled}
	for i := range got.Samples {
		s := &got.Samples[i]
		if s.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK != unix.PERF_RECORD_MISC_USER {
			r.WrongMode++
		}
		ip := s.IP
		if ipAfter && ip > 0 {
			ip-- // within the instruction before: the same function for the loop's body
		}
		if funcAt(ip) != loop {
			continue
		}
		r.Attributed++
		if s.Addr != 0 {
			r.Addressed++
			if s.Addr >= lo && s.Addr < hi && (s.Addr-lo)%8 == 0 {
				r.AddressRight++
			}
		}
	}
	return r
}

// preciseSamplers judges each precise memory sampler the host has (PEBS,
// IBS); none is judged on a host without one.
func preciseSamplers(plan samplerPlan, cfgs []sampling.Config) []sampler.Row {
	var rows []sampler.Row
	for _, c := range cfgs {
		if !c.Memory {
			continue
		}
		runs, err := preciseRuns(plan, c)
		if err != nil {
			rows = append(rows, sampler.Row{Sampler: c.Name, Figure: sampler.Accuracy, Verdict: validate.NotMeasurable, Reason: err.Error()})
			continue
		}
		rows = append(rows, sampler.Judge(c.Name, runs, preciseThresholds)...)
	}
	return rows
}

// preciseConfigs are the precise memory samplers the sampling collector
// would open here (none where the host has no PEBS, IBS or SPE).
func preciseConfigs(f Options, s setup) []sampling.Config {
	cfgs, _, err := sampling.Plan(s.pmus, sampling.Options{Period: f.sampling.period, LdLat: f.sampling.ldlat, NoSPE: true})
	if err != nil {
		return nil
	}
	return cfgs
}
