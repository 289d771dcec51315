package collector

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// The samplers the validation judges on every host, by the names their
// rows and series carry.
const (
	timerSampler     = "timer"       // the address sampler's cpu-clock samples with registers
	pageFaultSampler = "page-faults" // a sampled software event
)

// samplerThresholds are each sampler's bounds (docs/trust.md says why).
// A page fault is counted by the kernel at the faulting instruction and a
// sample written at each period's overflow: exact but for rounding, so
// the page-fault sampler is held to 1% and to the instruction. A cpu-clock
// sample comes from an hrtimer on the task's clock, whose handling the
// thread's CPU time counts too: at 100 µs it caught 0.92 to 0.96 of the
// samples its CPU time implies on this project's VMs, at 1 ms 0.985 to
// 0.99: held to 10%, and to the loop's functions; its accuracy at 100 µs
// varied run to run by a standard error up to 3% there (the handling's
// share moves with the host's interrupts), so stability is held to 5%.
var samplerThresholds = map[string]sampler.Thresholds{
	pageFaultSampler: {Accuracy: 0.01, Stability: 0.01, Bias: 0.01, Attribution: 0.99, Address: 0.99, ModeLeak: 0, Loss: 0.01},
	timerSampler:     {Accuracy: 0.10, Stability: 0.05, Bias: 0.02, Attribution: 0.95, Address: 0.95, ModeLeak: 0, Loss: 0.01},
}

// samplerPlan is how much each sampler's validation runs: periods and runs
// each, and the size of the work.
type samplerPlan struct {
	faultPeriods []uint64 // page faults per sample
	faultPages   int
	timerPeriods []uint64 // ns of CPU time per sample
	timerSamples int      // samples a timer run is long enough for
	runs         int
}

// planSamplers: the periods around the exporter's (the address sampler's
// 1 ms, --collector.comm.period), a shorter and a longer one, as the
// thesis measures accuracy across intervals; quick (--validate.on-start,
// check) only the exporter's. A run's samples fit its ring (64 pages):
// 1,024 faults at period 1, and about 1,000 timer samples at 100 µs. The
// fault periods are odd, as the exporter's default sampling period is
// prime (10007): TwoStores alternates its two stores, so an even period
// would take every sample from one of them (aliasing, which the bias
// figure would rightly fail).
func planSamplers(quick bool) samplerPlan {
	if quick {
		return samplerPlan{faultPeriods: []uint64{1, 17}, faultPages: 512, timerPeriods: []uint64{1_000_000}, timerSamples: 50, runs: 2}
	}
	return samplerPlan{faultPeriods: []uint64{1, 17, 61}, faultPages: 1024, timerPeriods: []uint64{100_000, 1_000_000, 10_000_000}, timerSamples: 100, runs: 5}
}

// samplerResolver resolves a sample to the access it made: the address
// sampler's decoder (feed.Decoder.Resolve), or a broken one in a test.
type samplerResolver func(s *perfrecord.Sample) (memaccess.Access, memop.Reason)

// validateSamplers judges the page-fault sampler and the timer sampler on
// this host, each on its loops, and the precise memory samplers the host
// has (precise: PEBS, IBS). A sampler that cannot open here is a
// not_measurable row with the reason.
func validateSamplers(plan samplerPlan, precise []sampling.Config) []sampler.Row {
	dec, err := newDecoder("/proc", comdetect.New(comdetect.Options{}))
	var resolve samplerResolver
	if err == nil {
		resolve = dec.Resolve
	}
	var rows []sampler.Row
	for _, v := range []struct {
		name string
		runs func(samplerPlan, samplerResolver) ([]sampler.Run, error)
	}{{pageFaultSampler, pageFaultRuns}, {timerSampler, timerRuns}} {
		runs, err := v.runs(plan, resolve)
		if err != nil {
			rows = append(rows, sampler.Row{Sampler: v.name, Figure: sampler.Accuracy, Verdict: validate.NotMeasurable, Reason: err.Error()})
			continue
		}
		rows = append(rows, sampler.Judge(v.name, runs, samplerThresholds[v.name])...)
	}
	return append(rows, preciseSamplers(plan, precise)...)
}

// pageFaultRuns samples the page faults of TwoStores on fresh pages at
// each period: the events are the pages written; the samples of the loop
// are those whose fault address lies in its pages (the Go runtime faults
// beside it, elsewhere); each is attributed when its instruction, decoded
// at the sample's IP with its registers, writes the faulting address; its
// address is right when it is the byte TwoStores writes in that page.
func pageFaultRuns(plan samplerPlan, resolve samplerResolver) ([]sampler.Run, error) {
	var runs []sampler.Run
	for _, period := range plan.faultPeriods {
		for range plan.runs {
			mem, page, release, err := selftest.FreshMapping(plan.faultPages)
			if err != nil {
				return nil, err
			}
			var wrote int
			got, err := selftest.Sample(selftest.Sampler{
				Attr:       eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS, ExcludeKernel: true},
				Period:     period,
				SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_REGS_USER,
				RegsUser:   memop.RegsMask(runtime.GOARCH),
			}, 64, func() { wrote = loops.TwoStores(mem, page) })
			base := uint64(uintptr(unsafe.Pointer(&mem[0])))
			release()
			if err != nil {
				return nil, fmt.Errorf("page-fault sampler: %w", err)
			}
			runs = append(runs, faultRun(period, wrote, page, base, got, resolve))
		}
	}
	return runs, nil
}

// faultRun judges one page-fault run's samples against the loop's pages.
func faultRun(period uint64, wrote, page int, base uint64, got selftest.SampledRun, resolve samplerResolver) sampler.Run {
	r := sampler.Run{Period: period, Events: float64(wrote), Lost: got.Lost + got.Dropped, Throttled: got.Throttled}
	end := base + uint64(wrote*page)
	storeIP := [2]map[uint64]int{{}, {}} // by the offset a store writes: its IPs
	for i := range got.Samples {
		s := &got.Samples[i]
		if s.Addr < base || s.Addr >= end {
			continue
		}
		r.Samples++
		k := int((s.Addr - base) / uint64(page))
		if s.Addr == base+uint64(k*page+loops.StoreOffsets[k%2]) {
			r.AddressRight++
			storeIP[k%2][s.IP]++
		}
		r.Addressed++
		if s.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK != unix.PERF_RECORD_MISC_USER {
			r.WrongMode++
		}
		if resolve != nil {
			if a, reason := resolve(s); reason == memop.Resolved && a.Store && a.Addr == s.Addr {
				r.Attributed++
			}
		}
	}
	// Each store's samples are those at its IP (the one most of its
	// pages' faults name); its share of the events is its share of pages.
	for k, name := range []string{"store at +0", "store at +8"} {
		var ip uint64
		for at, n := range storeIP[k] {
			if n > storeIP[k][ip] {
				ip = at
			}
		}
		samples := 0
		for i := range got.Samples {
			if got.Samples[i].IP == ip && ip != 0 {
				samples++
			}
		}
		r.Shares = append(r.Shares, sampler.Share{Name: name, Samples: samples, Expected: float64((wrote + 1 - k) / 2)})
	}
	return r
}

// timerRuns samples this thread's user-mode CPU time with its registers,
// as the address sampler does, at each period over rounds of SpinA, SpinB
// and SumLoads until the thread has run for timerSamples periods: the
// events are the thread's CPU time in ns; a sample is attributed when it
// lies in one of the three loops (the Go symbol table says where); SpinA
// and SpinB do equal work, so each holds half of their samples; each
// SumLoads sample the decoder resolves must name an element of its array.
// (A pointer chase, i = chain[i], cannot serve: its load overwrites its
// own index, so no sample after it can give its address, and the decoder
// rightly resolves none.)
func timerRuns(plan samplerPlan, resolve samplerResolver) ([]sampler.Run, error) {
	array := make([]uint64, 1<<14)
	lo := uint64(uintptr(unsafe.Pointer(&array[0])))
	hi := lo + uint64(len(array))*8
	names := map[string]int{funcName(loops.SpinA): 0, funcName(loops.SpinB): 1, funcName(loops.SumLoads): 2}
	var runs []sampler.Run
	for _, period := range plan.timerPeriods {
		target := time.Duration(period) * time.Duration(plan.timerSamples)
		for range plan.runs {
			var sink uint64
			got, err := selftest.Sample(timerSamplerOf(period, true), 64, func() {
				start, err := perf.ThreadCPU()
				for now := start; err == nil && now-start < target; now, err = perf.ThreadCPU() {
					// SpinA and SpinB alternate every few µs, far within
					// a period: alternating every 0.6 ms, in step with the
					// 1 ms period, gave one of them 0.087 more than its
					// half on a loaded CI run (the period aliasing the
					// loop, not the sampler's bias).
					for range 64 {
						sink += loops.SpinA(2_000) + loops.SpinB(2_000)
					}
					sink += loops.SumLoads(array, 16) // about a quarter of the time: enough samples to check addresses
				}
			})
			if err != nil {
				return nil, fmt.Errorf("timer sampler: %w", err)
			}
			_ = sink
			// Lost only as LOST records say: a clock's count over its period
			// is not a count of samples due (the accuracy says how far).
			r := sampler.Run{Period: period, Events: float64(got.CPUTime.Nanoseconds()), Samples: len(got.Samples), Lost: got.Lost, Throttled: got.Throttled}
			var in [3]int
			for i := range got.Samples {
				s := &got.Samples[i]
				if s.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK != unix.PERF_RECORD_MISC_USER {
					r.WrongMode++
				}
				f, ok := names[funcAt(s.IP)]
				if !ok {
					continue
				}
				r.Attributed++
				in[f]++
				if f == 2 && resolve != nil {
					if a, reason := resolve(s); reason == memop.Resolved {
						r.Addressed++
						if a.Addr >= lo && a.Addr < hi && (a.Addr-lo)%8 == 0 {
							r.AddressRight++
						}
					}
				}
			}
			r.Shares = []sampler.Share{{Name: "SpinA", Samples: in[0], Expected: 0.5}, {Name: "SpinB", Samples: in[1], Expected: 0.5}}
			runs = append(runs, r)
		}
	}
	mode, err := timerModeRun(plan, true)
	if err != nil {
		return nil, err
	}
	return append(runs, mode), nil
}

// timerSamplerOf is the address sampler's event at period (ns of CPU
// time): cpu-clock with the user registers, user mode only where userOnly.
func timerSamplerOf(period uint64, userOnly bool) selftest.Sampler {
	return selftest.Sampler{
		Attr:       eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, ExcludeKernel: userOnly},
		Period:     period,
		SampleType: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_REGS_USER,
		RegsUser:   memop.RegsMask(runtime.GOARCH),
	}
}

// kernelHalf is where the kernel's addresses start on amd64 and arm64 (the
// upper canonical half).
const kernelHalf = 1 << 63

// timerModeRun samples the Exec-Mode loop (selftest.UserAndKernel: user
// spins beside system calls) at the exporter's period, user mode only
// where userOnly, as the address sampler samples: a sample reported in
// kernel mode, or whose IP is a kernel address, leaks. It counts for the
// mode leak and loss alone.
func timerModeRun(plan samplerPlan, userOnly bool) (sampler.Run, error) {
	const period = 1_000_000
	target := time.Duration(period) * time.Duration(plan.timerSamples)
	got, err := selftest.Sample(timerSamplerOf(period, userOnly), 64, func() {
		start, err := perf.ThreadCPU()
		for now := start; err == nil && now-start < target; now, err = perf.ThreadCPU() {
			selftest.UserAndKernel(200)
		}
	})
	if err != nil {
		return sampler.Run{}, fmt.Errorf("timer sampler, both modes: %w", err)
	}
	r := sampler.Run{Period: period, Samples: len(got.Samples), Lost: got.Lost, Throttled: got.Throttled, ModeOnly: true}
	for i := range got.Samples {
		s := &got.Samples[i]
		if s.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK != unix.PERF_RECORD_MISC_USER || s.IP >= kernelHalf {
			r.WrongMode++
		}
	}
	return r, nil
}

// funcName is the symbol of a function value, as the binary's table names it.
func funcName(fn any) string {
	return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
}

// funcAt names the function holding pc ("" where none does).
func funcAt(pc uint64) string {
	if f := runtime.FuncForPC(uintptr(pc)); f != nil {
		return f.Name()
	}
	return ""
}

// logSamplers says how the samplers fared: a failed figure is a warning,
// as a failed event is.
func logSamplers(log *slog.Logger, rows []sampler.Row) {
	for _, r := range rows {
		if r.Verdict == validate.Fail {
			log.Warn("sampler failed validation: the figures resting on it are not to be trusted", "sampler", r.Sampler, "figure", r.Figure, "period", r.Period, "value", r.Value, "bound", r.Bound, "reason", r.Reason)
		}
	}
	for _, name := range samplerNames(rows) {
		var mine []sampler.Row
		for _, r := range rows {
			if r.Sampler == name {
				mine = append(mine, r)
			}
		}
		passed, measured := sampler.Passed(mine)
		log.Info("sampler validated", "sampler", name, "passed", passed, "measured", measured)
	}
}

// writeSamplers prints the samplers' figures, a line each.
func writeSamplers(w io.Writer, rows []sampler.Row) {
	fmt.Fprintln(w, "Samplers on the sampling loops (Sasongko's figures; bounds in docs/trust.md):")
	for _, r := range rows {
		mark := map[validate.Verdict]string{validate.Pass: "[pass]", validate.Fail: "[FAIL]", validate.NotMeasurable: "[n/m] "}[r.Verdict]
		at := ""
		if r.Period != 0 {
			at = fmt.Sprintf(" at period %d", r.Period)
		}
		if r.Verdict == validate.NotMeasurable {
			fmt.Fprintf(w, "  %s %s %s%s: %s\n", mark, r.Sampler, r.Figure, at, r.Reason)
			continue
		}
		fmt.Fprintf(w, "  %s %s %s%s: %.4g (bound %.4g, %d runs)", mark, r.Sampler, r.Figure, at, r.Value, r.Bound, r.Runs)
		if r.Reason != "" {
			fmt.Fprintf(w, ": %s", r.Reason)
		}
		fmt.Fprintln(w)
	}
}

// samplerNames are the samplers rows judge, in their order.
func samplerNames(rows []sampler.Row) []string {
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Sampler) {
			names = append(names, r.Sampler)
		}
	}
	return names
}
