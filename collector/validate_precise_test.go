package collector

import (
	"math"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
)

// A PEBS-shaped run (the IP the load's) and an IBS-shaped one (the IP the
// next instruction's, Config.IPAfter), built by hand from SumLoads'
// address in this binary and an array's: of 100 samples, 98 at the loop
// with addresses of the array, 2 elsewhere; one in kernel mode; the
// event counted 100,050 loads at period 1,000. So: accuracy 100 of
// 100.05 (0.9995), attribution 0.98 (below 0.99: fail), every checked
// address right, mode leak 0.01 (fail). An IBS run read as PEBS (its IP
// not moved back) attributes none of the samples at the loop's last byte.
func TestPreciseRunFromFixtures(t *testing.T) {
	entry := uint64(reflect.ValueOf(loops.SumLoads).Pointer())
	spin := uint64(reflect.ValueOf(loops.SpinA).Pointer())
	const lo, hi = 0x7f0000000000, 0x7f0000080000
	run := func(ip uint64) selftest.SampledRun {
		r := selftest.SampledRun{Count: 100_050}
		for i := range 100 {
			s := perfrecord.Sample{IP: ip, Addr: lo + uint64(i)*8, Misc: unix.PERF_RECORD_MISC_USER}
			if i >= 98 {
				s.IP, s.Addr = spin+4, 0
			}
			if i == 0 {
				s.Misc = unix.PERF_RECORD_MISC_KERNEL
			}
			r.Samples = append(r.Samples, s)
		}
		return r
	}
	loop := funcName(loops.SumLoads)
	pebs := preciseRun(1000, run(entry+8), loop, false, lo, hi)
	if pebs.Samples != 100 || pebs.Attributed != 98 || pebs.Addressed != 98 || pebs.AddressRight != 98 || pebs.WrongMode != 1 {
		t.Errorf("PEBS-shaped run: %+v", pebs)
	}
	rows := sampler.Judge("mem-loads", []sampler.Run{pebs}, preciseThresholds)
	for _, c := range []struct {
		fig   string
		value float64
		want  validate.Verdict
	}{{sampler.Accuracy, 100 / 100.05, validate.Pass}, {sampler.Attribution, 0.98, validate.Fail}, {sampler.Address, 1, validate.Pass}, {sampler.ModeLeak, 0.01, validate.Fail}} {
		period := uint64(0)
		if c.fig == sampler.Accuracy {
			period = 1000
		}
		if r := figure(t, rows, "mem-loads", c.fig, period); math.Abs(r.Value-c.value) > 1e-12 || r.Verdict != c.want {
			t.Errorf("%s: %+v, want %v %s", c.fig, r, c.value, c.want)
		}
	}
	// IBS: the IP is the next instruction's, so the instruction before it
	// is judged: inside the loop still for an IP inside it, and another
	// function's for an IP at the loop's first byte.
	ibs := preciseRun(1000, run(entry+8), loop, true, lo, hi)
	if ibs.Attributed != 98 {
		t.Errorf("IBS-shaped run: %+v", ibs)
	}
	if r := preciseRun(1000, run(entry), loop, false, lo, hi); r.Attributed != 98 {
		t.Errorf("a sample at the loop's first byte: %+v", r)
	}
	if r := preciseRun(1000, run(entry), loop, true, lo, hi); r.Attributed != 0 {
		t.Errorf("an IBS sample whose IP is the loop's first byte names the instruction before it, another function's: %+v", r)
	}
}

// Where the host has PEBS or IBS, its memory samplers are judged live on
// their loops: every sample's data address in the loop's array, and the
// samples at the loop; on a host without one, none is judged (and the
// host gate says why this test did not run).
func TestPreciseSamplersLive(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireFeature(t, hostgate.PreciseSampling)
	f := parse(t, []string{"serve"})
	f.Resolve()
	s := discover(*f)
	cfgs := preciseConfigs(*f, s)
	if len(cfgs) == 0 {
		t.Fatal("the host gate proved precise sampling, and no precise sampler was planned")
	}
	rows := preciseSamplers(planSamplers(true), cfgs)
	for _, r := range rows {
		if (r.Figure == sampler.Address || r.Figure == sampler.Attribution) && r.Verdict == validate.Fail {
			t.Errorf("%+v", r)
		}
		t.Logf("%+v", r)
	}
}
