package platformcount

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/platform"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// The msr PMU's tsc, the one platform counter every x86 host here has,
// counts on each online CPU at the TSC's rate: over a second of this
// process's wall clock, what perf stat counts of msr/tsc/ on that CPU
// over its own second (an independent reader of the same register),
// within 2%.
func TestTSCCountsAsPerfStat(t *testing.T) {
	tsc := tscCounters(t)
	perfBin := testenv.RequireTool(t, "perf")
	c, err := Open(tsc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func() map[int]uint64 {
		m := map[int]uint64{}
		if err := c.Read(func(_ *platform.Counter, cpu int, n uint64) { m[cpu] = n }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	start, t0 := read(), time.Now()
	time.Sleep(time.Second)
	end, elapsed := read(), time.Since(t0)
	out, err := exec.Command(perfBin, "stat", "-x,", "-a", "-A", "-e", "msr/tsc/", "--", "sleep", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("perf stat: %v\n%s", err, out)
	}
	perfRate := map[int]float64{}
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 4 || !strings.HasPrefix(f[0], "CPU") {
			continue
		}
		cpu, _ := strconv.Atoi(strings.TrimPrefix(f[0], "CPU"))
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			perfRate[cpu] = v // over perf's second of sleep(1)
		}
	}
	for cpu, e := range end {
		rate := float64(e-start[cpu]) / elapsed.Seconds()
		p, ok := perfRate[cpu]
		if !ok {
			continue // offline during perf's run (another test's hotplug)
		}
		t.Logf("CPU %d: %.4g TSC cycles/s, perf stat %.4g in its second", cpu, rate, p)
		if rate < 0.98*p || rate > 1.02*p {
			t.Errorf("CPU %d: %.4g TSC cycles/s, perf stat counted %.4g over sleep 1", cpu, rate, p)
		}
	}
}

// Rate of msr/tsc/ on a CPU is the TSC's frequency: what perf stat counts
// of it on that CPU over sleep 1, within 2%, over a window of a fifth of
// that (the kernel's enabled time its denominator).
func TestRateIsTheTSCFrequency(t *testing.T) {
	tsc := tscCounters(t)
	perfBin := testenv.RequireTool(t, "perf")
	cpu := tsc[0].CPUs[0]
	hz, err := Rate(tsc[0], cpu, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(perfBin, "stat", "-x,", "-C", strconv.Itoa(cpu), "-e", "msr/tsc/", "--", "sleep", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("perf stat: %v\n%s", err, out)
	}
	var perfHz float64
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		if f := strings.Split(line, ","); len(f) > 2 && strings.HasPrefix(f[2], "msr/tsc") {
			perfHz, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	t.Logf("CPU %d: Rate %.6g Hz, perf stat %.6g over sleep 1", cpu, hz, perfHz)
	if perfHz == 0 || hz < 0.98*perfHz || hz > 1.02*perfHz {
		t.Errorf("CPU %d: Rate %.6g Hz, perf stat counted %.6g in sleep 1\n%s", cpu, hz, perfHz, out)
	}
}

// BenchmarkReadTSC reads the msr PMU's tsc on every online CPU, as the
// platform collector does at each scrape: what one read of one platform
// counter costs (ns/op over counters/op).
func BenchmarkReadTSC(b *testing.B) {
	c, err := Open(tscCounters(b))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	n := 0
	for b.Loop() {
		n = 0
		if err := c.Read(func(*platform.Counter, int, uint64) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "counters/op")
}

// tscCounters are this host's msr/tsc/ counters, one per online CPU, as
// the platform collector selects them; skipped where there are none.
func tscCounters(tb testing.TB) []platform.Counter {
	tb.Helper()
	testenv.RequireRoot(tb)
	pmus, err := pmu.Discover("/sys")
	if err != nil {
		tb.Fatal(err)
	}
	online, err := host.OnlineCPUs("/sys")
	if err != nil {
		tb.Fatal(err)
	}
	cs, err := platform.Select(pmus, online, "")
	if err != nil {
		tb.Fatal(err)
	}
	var tsc []platform.Counter
	for _, c := range cs {
		if c.PMU == "msr" && c.Event == "tsc" {
			tsc = append(tsc, c)
		}
	}
	if len(tsc) == 0 {
		tb.Skip("no msr/tsc/ PMU event on this host")
	}
	return tsc
}

// A multiplexed count is scaled as perf stat scales it (hand-computed):
// counted half the time, doubled; counted throughout, or never, as is.
func TestScaled(t *testing.T) {
	for _, c := range []struct{ count, enabled, running, want uint64 }{
		{100, 10, 5, 200}, {100, 10, 10, 100}, {100, 10, 0, 100}, {3, 3, 2, 5}, {7, 0, 0, 7},
	} {
		if got := Scaled(c.count, c.enabled, c.running); got != c.want {
			t.Errorf("Scaled(%d, %d, %d) = %d, want %d", c.count, c.enabled, c.running, got, c.want)
		}
	}
}
