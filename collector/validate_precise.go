package collector

import (
	"fmt"
	"math"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/formats/spe"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// preciseThresholds bound the PMU samplers (PEBS, IBS, SPE): what the
// thesis found of them (docs/trust.md). Accuracy is against the event's
// own count, as the thesis measures it (SPE has none: against the loop's
// known operations); PEBS held it within 1% with no spread, IBS op's
// general events within a few percent, so 5%. The sample's IP is the
// access (PEBS at precise_ip 2, SPE) or the instruction after it (IBS,
// PEBS at 1: Config.IPAfter), and its data address is the record's own,
// so both are held to 99%.
var preciseThresholds = sampler.Thresholds{Accuracy: 0.05, Stability: 0.02, Bias: 0.02, Attribution: 0.99, Address: 0.99, ModeLeak: 0, Loss: 0.01}

// precisePeriods are the periods the precise samplers are judged at: the
// exporter's default (--collector.sampling.period, prime) and a shorter
// and a longer one, all prime; each a multiple of 16 where the PMU needs it
// (IBS) or of 256 (SPE), rounded up.
var precisePeriods = []uint64{1009, 10007, 100003}

// preciseReps are the passes over the array one run makes: 64 × 65,536
// memory operations, some 4,000 samples at the shortest period.
const preciseReps = 64

// speAuxPages is the AUX area of an SPE run: 16 MiB, for some 17,000
// records of 64 bytes at the shortest period with room to spare.
const speAuxPages = 4096

// preciseLoop is what a precise sampler is judged on: two functions of one
// memory instruction each (SumLoads and SumLoadsB, or StoreAll and
// StoreAllB) over the two halves of an array [lo, hi), so each makes half
// of the ops memory operations (the Bias-Bench).
type preciseLoop struct {
	funcs  [2]string
	lo, hi uint64
	ops    float64
}

// preciseRuns judges a precise memory sampler of this host on its loop:
// the loads for a load sampler (mem-loads, IBS op, SPE), the stores for a
// store sampler (mem-stores).
func preciseRuns(plan samplerPlan, c sampling.Config) ([]sampler.Run, error) {
	array := make([]uint64, 1<<16)
	half := len(array) / 2
	lo := uint64(uintptr(unsafe.Pointer(&array[0])))
	loop := preciseLoop{funcs: [2]string{funcName(loops.SumLoads), funcName(loops.SumLoadsB)}, lo: lo, hi: lo + uint64(len(array))*8, ops: float64(len(array) * preciseReps)}
	work := func() {
		for range preciseReps {
			loops.SumLoads(array[:half], 1) // not inlined: never optimised away
			loops.SumLoadsB(array[half:], 1)
		}
	}
	if c.Name == "mem-stores" {
		loop.funcs = [2]string{funcName(loops.StoreAll), funcName(loops.StoreAllB)}
		work = func() {
			for range preciseReps {
				loops.StoreAll(array[:half], 1)
				loops.StoreAllB(array[half:], 1)
			}
		}
	}
	s := selftest.Sampler{Attr: c.Attr, SampleType: c.SampleType, Leader: c.Leader}
	if c.Aux {
		s.AuxPages = speAuxPages
	}
	var runs []sampler.Run
	for _, p := range precisePeriods {
		s.Period = c.Align(p)
		for range plan.runs {
			got, err := selftest.Sample(s, 64, work)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			if c.Aux {
				if got.Samples, err = speSamples(got.Aux); err != nil {
					return nil, fmt.Errorf("%s: %w", c.Name, err)
				}
			}
			runs = append(runs, preciseRun(c, s.Period, got, loop))
		}
	}
	return runs, nil
}

// speSamples are the loads and stores of an SPE run's AUX data, as perf
// synthesizes them; a record cut off at the end (the area filled) is left
// out, as its AUX record's truncated flag counts it.
func speSamples(aux []byte) ([]perfrecord.Sample, error) {
	var out []perfrecord.Sample
	_, err := spe.Records(aux, func(r *spe.Record) {
		var s perfrecord.Sample
		if r.Sample(&s, 0, perfdata.TimeConv{}) {
			out = append(out, s)
		}
	})
	if err != nil {
		return out, fmt.Errorf("the AUX data: %w", err)
	}
	return out, nil
}

// preciseRun judges one run of precise sampler c at period:
//   - its events are the event's own count, or the loop's known memory
//     operations for a sampler that has none (SPE);
//   - a sample is attributed when its instruction (the one before its IP
//     where the IP is the next one's) lies in one of the loop's two
//     functions, and its share is that function's;
//   - its address is right when it is an element of the loop's array;
//   - IBS op samples every op, so its loads are a subset, judged against
//     the loop's known loads (the thesis's subset events);
//   - samples due while the event was multiplexed off count as lost (the
//     count scaled by enabled ÷ running, as perf stat scales it), and so
//     does each AUX record that said the area had filled.
func preciseRun(c sampling.Config, period uint64, got selftest.SampledRun, loop preciseLoop) sampler.Run {
	r := sampler.Run{Period: period, Events: float64(got.Count), Samples: len(got.Samples), Lost: got.Lost + got.Dropped + got.AuxTruncated, Throttled: got.Throttled}
	if c.Aux {
		r.Events = loop.ops
	}
	if got.Running > 0 && got.Enabled > got.Running {
		off := float64(got.Count) * (float64(got.Enabled)/float64(got.Running) - 1)
		r.Lost += uint64(math.Round(off / float64(period)))
	}
	var in [2]int
	for i := range got.Samples {
		s := &got.Samples[i]
		if s.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK != unix.PERF_RECORD_MISC_USER {
			r.WrongMode++
		}
		ip := s.IP
		if c.IPAfter && ip > 0 {
			ip-- // within the instruction before: the same function for the loop's body
		}
		fn := funcAt(ip)
		k := 0
		switch fn {
		case loop.funcs[0]:
		case loop.funcs[1]:
			k = 1
		default:
			continue
		}
		r.Attributed++
		in[k]++
		if s.Addr != 0 {
			r.Addressed++
			if s.Addr >= loop.lo && s.Addr < loop.hi && (s.Addr-loop.lo)%8 == 0 {
				r.AddressRight++
			}
		}
	}
	r.Shares = []sampler.Share{{Name: loop.funcs[0], Samples: in[0], Expected: 0.5}, {Name: loop.funcs[1], Samples: in[1], Expected: 0.5}}
	if c.Name == "ibs_op" {
		r.SubsetEvents, r.SubsetSamples = loop.ops, r.Addressed
	}
	return r
}

// preciseSamplers judges each precise memory sampler the host has (PEBS,
// IBS, SPE); none is judged on a host without one.
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
	cfgs, _, err := sampling.Plan(s.pmus, sampling.Options{Period: f.sampling.period, LdLat: f.sampling.ldlat})
	if err != nil {
		return nil
	}
	return cfgs
}
