package collector

import (
	"runtime"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

func figure(t *testing.T, rows []sampler.Row, name, fig string, period uint64) sampler.Row {
	t.Helper()
	for _, r := range rows {
		if r.Sampler == name && r.Figure == fig && r.Period == period {
			return r
		}
	}
	t.Fatalf("no %s %s row at period %d in %+v", name, fig, period, rows)
	return sampler.Row{}
}

// ownResolver is the address sampler's decoder over this process.
func ownResolver(t *testing.T) samplerResolver {
	dec, err := newDecoder("/proc", comdetect.New(comdetect.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	return dec.Resolve
}

// On any host, the page-fault sampler is held to the ground truth of
// TwoStores: one sample per page written at period 1 (and per 17 pages at
// 17), each at the store that wrote it (its decoded access is the fault
// address), each address the byte written, half from each store, none
// lost or in kernel mode. The timer sampler's samples lie in its loops,
// split evenly between two equal ones, and the addresses the decoder gives
// of SumLoads' loads are elements of its array.
func TestSamplersAgainstTheirLoops(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64", "the decoder knows amd64 and arm64")
	rows := validateSamplers(planSamplers(true), nil)
	for _, c := range []struct {
		sampler, fig string
		period       uint64
	}{
		{pageFaultSampler, sampler.Accuracy, 1}, {pageFaultSampler, sampler.Accuracy, 17}, {pageFaultSampler, sampler.Bias, 1},
		{pageFaultSampler, sampler.Attribution, 0}, {pageFaultSampler, sampler.Address, 0}, {pageFaultSampler, sampler.ModeLeak, 0}, {pageFaultSampler, sampler.Loss, 0},
		{timerSampler, sampler.Attribution, 0}, {timerSampler, sampler.Address, 0}, {timerSampler, sampler.ModeLeak, 0},
	} {
		if r := figure(t, rows, c.sampler, c.fig, c.period); r.Verdict != validate.Pass {
			t.Errorf("%s %s (period %d): %+v", c.sampler, c.fig, c.period, r)
		}
	}
	if r := figure(t, rows, pageFaultSampler, sampler.Accuracy, 1); r.Value != 1 {
		t.Errorf("page faults at period 1: accuracy %v, want exactly 1 (a sample per page)", r.Value)
	}
}

// A sampler broken on purpose fails its verdicts: one whose period is not
// the one it says (it samples every 34th fault and claims 17) has accuracy
// 0.5; a decoder that drops the registers an address is computed from
// attributes no page fault to its store and gives no right timer address;
// a timer that does not exclude the kernel (as IBS cannot, in hardware)
// leaks the Exec-Mode loop's system calls into its samples, where the
// user-only one leaks none.
func TestBrokenSamplersFail(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64", "the decoder knows amd64 and arm64")
	plan := planSamplers(true)
	plan.faultPeriods = []uint64{34}
	runs, err := pageFaultRuns(plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		runs[i].Period = 17
	}
	if r := figure(t, sampler.Judge(pageFaultSampler, runs, samplerThresholds[pageFaultSampler]), pageFaultSampler, sampler.Accuracy, 17); r.Verdict != validate.Fail || r.Value > 0.55 {
		t.Errorf("sampling every 34th fault as if every 17th: %+v", r)
	}

	resolve := ownResolver(t)
	pc := memop.AMD64IP
	if runtime.GOARCH == "arm64" {
		pc = memop.ARM64PC
	}
	dropRegs := func(s *perfrecord.Sample) (memaccess.Access, memop.Reason) {
		c := *s
		c.Regs = [64]uint64{}
		c.Regs[pc] = s.Regs[pc] // the instruction pointer alone
		return resolve(&c)
	}
	plan = planSamplers(true)
	faults, err := pageFaultRuns(plan, dropRegs)
	if err != nil {
		t.Fatal(err)
	}
	if r := figure(t, sampler.Judge(pageFaultSampler, faults, samplerThresholds[pageFaultSampler]), pageFaultSampler, sampler.Attribution, 0); r.Verdict != validate.Fail {
		t.Errorf("page faults through a decoder without registers: %+v", r)
	}
	timer, err := timerRuns(plan, dropRegs)
	if err != nil {
		t.Fatal(err)
	}
	if r := figure(t, sampler.Judge(timerSampler, timer, samplerThresholds[timerSampler]), timerSampler, sampler.Address, 0); r.Verdict == validate.Pass {
		t.Errorf("timer samples through a decoder without registers: %+v", r)
	}
	userOnly, err := timerModeRun(plan, true)
	if err != nil {
		t.Fatal(err)
	}
	both, err := timerModeRun(plan, false)
	if err != nil {
		t.Fatal(err)
	}
	if userOnly.Samples == 0 || userOnly.WrongMode != 0 || both.WrongMode == 0 {
		t.Errorf("Exec-Mode loop: user-only %d samples, %d in kernel mode; both modes %d samples, %d in kernel mode", userOnly.Samples, userOnly.WrongMode, both.Samples, both.WrongMode)
	}
	if r := figure(t, sampler.Judge(timerSampler, []sampler.Run{both}, samplerThresholds[timerSampler]), timerSampler, sampler.ModeLeak, 0); r.Verdict != validate.Fail {
		t.Errorf("a timer sampling both modes: %+v", r)
	}
}
