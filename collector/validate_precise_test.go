package collector

import (
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest/loops"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// preciseFixtureLoop is the loads' loop of the precise samplers over a
// made-up array [lo, hi) of 98,000 loads.
func preciseFixtureLoop() preciseLoop {
	return preciseLoop{funcs: [2]string{funcName(loops.SumLoads), funcName(loops.SumLoadsB)}, lo: 0x7f0000000000, hi: 0x7f0000080000, ops: 98_000}
}

// A PEBS-shaped run (the IP the load's) and an IBS-shaped one (the IP the
// next instruction's, Config.IPAfter), built by hand from the two load
// loops' addresses in this binary and an array's: of 100 samples, 49 in
// SumLoads and 49 in SumLoadsB with addresses of the array, 2 elsewhere;
// one in kernel mode; the event counted 100,050 at period 1,000. So:
// accuracy 100 of 100.05 (0.9995), attribution 0.98 (below 0.99: fail),
// bias 0 (49 and 49 of an even split), every checked address right, mode
// leak 0.01 (fail). A PEBS sample at a loop's first byte is the loop's;
// an IBS one names the instruction before, another function's. IBS's loads are
// a subset of its ops: 98 of the 98 the loop's loads make at the period.
// Multiplexed half of the time (enabled twice as long as running), the
// sampler missed the 100 samples the other half would have given: loss
// 100 of 200.
func TestPreciseRunFromFixtures(t *testing.T) {
	entry := [2]uint64{uint64(reflect.ValueOf(loops.SumLoads).Pointer()), uint64(reflect.ValueOf(loops.SumLoadsB).Pointer())}
	spin := uint64(reflect.ValueOf(loops.SpinA).Pointer())
	loop := preciseFixtureLoop()
	run := func(offset uint64) selftest.SampledRun {
		r := selftest.SampledRun{Count: 100_050}
		for i := range 100 {
			s := perfrecord.Sample{IP: entry[i%2] + offset, Addr: loop.lo + uint64(i)*8, Misc: unix.PERF_RECORD_MISC_USER}
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
	pebsCfg := sampling.Config{Name: "mem-loads"}
	pebs := preciseRun(pebsCfg, 1000, run(8), loop)
	if pebs.Samples != 100 || pebs.Attributed != 98 || pebs.Addressed != 98 || pebs.AddressRight != 98 || pebs.WrongMode != 1 || pebs.SubsetEvents != 0 {
		t.Errorf("PEBS-shaped run: %+v", pebs)
	}
	rows := sampler.Judge("mem-loads", []sampler.Run{pebs}, preciseThresholds)
	for _, c := range []struct {
		fig   string
		value float64
		want  validate.Verdict
	}{{sampler.Accuracy, 100 / 100.05, validate.Pass}, {sampler.Bias, 0, validate.Pass}, {sampler.Attribution, 0.98, validate.Fail}, {sampler.Address, 1, validate.Pass}, {sampler.ModeLeak, 0.01, validate.Fail}, {sampler.Loss, 0, validate.Pass}} {
		period := uint64(0)
		if c.fig == sampler.Accuracy || c.fig == sampler.Bias {
			period = 1000
		}
		if r := figure(t, rows, "mem-loads", c.fig, period); math.Abs(r.Value-c.value) > 1e-12 || r.Verdict != c.want {
			t.Errorf("%s: %+v, want %v %s", c.fig, r, c.value, c.want)
		}
	}
	// IBS: the IP is the next instruction's, so the instruction before it
	// is judged: inside the loop still for an IP inside it, and another
	// function's for an IP at the loop's first byte.
	ibsCfg := sampling.Config{Name: "ibs_op", IPAfter: true}
	ibs := preciseRun(ibsCfg, 1000, run(8), loop)
	if ibs.Attributed != 98 || ibs.SubsetEvents != 98_000 || ibs.SubsetSamples != 98 {
		t.Errorf("IBS-shaped run: %+v", ibs)
	}
	if r := figure(t, sampler.Judge("ibs_op", []sampler.Run{ibs}, preciseThresholds), "ibs_op", sampler.SubsetAccuracy, 1000); r.Value != 1 || r.Verdict != validate.Pass {
		t.Errorf("IBS's loads: %+v", r)
	}
	if r := preciseRun(pebsCfg, 1000, run(0), loop); r.Attributed != 98 {
		t.Errorf("a sample at the loop's first byte: %+v", r)
	}
	atEntry := selftest.SampledRun{Samples: []perfrecord.Sample{{IP: entry[0], Addr: loop.lo, Misc: unix.PERF_RECORD_MISC_USER}}}
	if r := preciseRun(ibsCfg, 1000, atEntry, loop); r.Attributed != 0 {
		t.Errorf("an IBS sample whose IP is SumLoads' first byte names the instruction before it, another function's: %+v", r)
	}
	muxed := run(8)
	muxed.Enabled, muxed.Running = 2*time.Second, time.Second
	if r := figure(t, sampler.Judge("mem-loads", []sampler.Run{preciseRun(pebsCfg, 1000, muxed, loop)}, preciseThresholds), "mem-loads", sampler.Loss, 0); r.Value != 0.5 || r.Verdict != validate.Fail {
		t.Errorf("multiplexed half of the time: %+v, want loss 0.5", r)
	}
}

// An SPE run's AUX data, laid out as an SPE unit writes it (packets as
// the Arm ARM gives them): 41 loads in SumLoads, 40 in SumLoadsB with
// addresses of the array, one of the first 41 at EL1 with a kernel PC, a
// branch between them (not a memory sample), and the area filled once
// (one AUX record truncated). SPE counts nothing, so the run is judged
// against the loop's 98,000 loads at period 1,225 (80 samples): 81 of 80
// (1.0125, within 5%); attribution 80 of 81 (the kernel one is no loop's);
// bias 0 (40 and 40); mode leak 1 of 81; loss 1 of 82.
func TestSPERunFromFixtures(t *testing.T) {
	entry := [2]uint64{uint64(reflect.ValueOf(loops.SumLoads).Pointer()), uint64(reflect.ValueOf(loops.SumLoadsB).Pointer())}
	loop := preciseFixtureLoop()
	var ops []perffile.SPEOp
	for i := range 81 {
		o := perffile.SPEOp{PC: entry[i%2] + 8, Virtual: loop.lo + uint64(i)*8, Total: 30, Timestamp: uint64(i + 1)}
		if i == 80 {
			o.PC, o.EL = 0xffff800008001000, 1
		}
		ops = append(ops, o)
		if i == 40 {
			ops = append(ops, perffile.SPEOp{PC: entry[0] + 16, Branch: true, Timestamp: 500})
		}
	}
	samples, err := speSamples(perffile.SPEPackets(ops...))
	if err != nil || len(samples) != 81 {
		t.Fatalf("%d samples, %v", len(samples), err)
	}
	got := selftest.SampledRun{Samples: samples, AuxTruncated: 1}
	r := preciseRun(sampling.Config{Name: "arm_spe", Aux: true}, 1225, got, loop)
	if r.Events != 98_000 || r.Attributed != 80 || r.AddressRight != 80 || r.WrongMode != 1 || r.Lost != 1 || r.SubsetEvents != 0 {
		t.Errorf("SPE run: %+v", r)
	}
	rows := sampler.Judge("arm_spe", []sampler.Run{r}, preciseThresholds)
	for _, c := range []struct {
		fig    string
		period uint64
		value  float64
		want   validate.Verdict
	}{{sampler.Accuracy, 1225, 81.0 / 80, validate.Pass}, {sampler.Bias, 1225, 0, validate.Pass}, {sampler.Attribution, 0, 80.0 / 81, validate.Fail}, {sampler.ModeLeak, 0, 1.0 / 81, validate.Fail}, {sampler.Loss, 0, 1.0 / 82, validate.Fail}} {
		if row := figure(t, rows, "arm_spe", c.fig, c.period); math.Abs(row.Value-c.value) > 1e-12 || row.Verdict != c.want {
			t.Errorf("%s: %+v, want %v %s", c.fig, row, c.value, c.want)
		}
	}
	if _, err := speSamples([]byte{0x49, 0x00, 0xff, 0xff}); err == nil {
		t.Error("AUX data with a header that names no packet: no error")
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

// A real PEBS recording (Skylake-SP, MEM_TRANS_RETIRED.LOAD_LATENCY at
// precise_ip 2, ../shared/recordings) judged as a run of the mem-loads
// sampler: its samples are read through the decoder the live path uses,
// and the mode each is judged in is the one perf script prints for it
// (-F misc: U, or K for the kernel). The recording sampled both modes, so
// every K is what a user-only sampler would leak; none of its samples is
// in this binary's loops.
func TestPreciseRunOfARecordedPEBS(t *testing.T) {
	file := filepath.Join(reference.Recordings(t), "perf.data.weight_struct")
	testenv.RequireTool(t, "perf")
	out, err := exec.Command("perf", "script", "-i", file, "-F", "misc").Output()
	if err != nil {
		t.Fatalf("perf script -F misc: %v", err)
	}
	var perfSamples, perfKernel int
	for _, l := range strings.Split(string(out), "\n") {
		switch strings.TrimSpace(l) {
		case "U":
			perfSamples++
		case "K":
			perfSamples++
			perfKernel++
		}
	}
	f, closeFile, err := recorded.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFile()
	var got selftest.SampledRun
	if _, bad, err := recorded.EachSample(f, file, io.Discard, recorded.Visitor{Sample: func(_ int, s *perfrecord.Sample) error {
		got.Samples = append(got.Samples, *s)
		return nil
	}}); err != nil || bad != 0 {
		t.Fatalf("%d bad samples, %v", bad, err)
	}
	r := preciseRun(sampling.Config{Name: "mem-loads"}, 10009, got, preciseFixtureLoop())
	if perfSamples == 0 || r.Samples != perfSamples || r.WrongMode != perfKernel || r.Attributed != 0 {
		t.Errorf("judged %d samples, %d in the kernel, %d in the loops; perf script printed %d, %d in the kernel", r.Samples, r.WrongMode, r.Attributed, perfSamples, perfKernel)
	}
}
