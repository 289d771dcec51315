package platformcount

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/plan/platform"
)

// The msr PMU's tsc, the one platform counter every x86 host here has,
// counts on each online CPU at the TSC's rate: what this package reads
// over about a second, per second, is what perf stat (an independent
// reader of the same register) counts of msr/tsc/ on that CPU per second
// of its enabled time, within 2%. Rates with rates: on a busy machine
// sleep 1 lasts longer than a second (1.026 s was seen), so perf's count
// is divided by the time perf says it counted, and ours by a window
// bracketed by clock readings around each read, so that a preemption
// between a read and its clock reading widens the bounds instead of
// skewing the rate.
func TestTSCCountsAsPerfStat(t *testing.T) {
	tsc := tscCounters(t)
	perfBin := testenv.RequireTool(t, "perf")
	c, err := Open(tsc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func() (m map[int]uint64, before, after time.Time) {
		m = map[int]uint64{}
		before = time.Now()
		if err := c.Read(func(_ *platform.Counter, cpu int, n uint64) { m[cpu] = n }); err != nil {
			t.Fatal(err)
		}
		return m, before, time.Now()
	}
	start, startBefore, startAfter := read()
	time.Sleep(time.Second)
	end, endBefore, endAfter := read()
	// The counts were taken somewhere within each read: the window lies
	// between these two.
	shortest, longest := endBefore.Sub(startAfter), endAfter.Sub(startBefore)
	out, err := exec.Command(perfBin, "stat", "-x,", "-a", "-A", "-e", "msr/tsc/", "--", "sleep", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("perf stat: %v\n%s", err, out)
	}
	perfRate := perfStatRates(t, out)
	for cpu, e := range end {
		n := float64(e - start[cpu])
		low, high := n/longest.Seconds(), n/shortest.Seconds()
		p, ok := perfRate[cpu]
		if !ok {
			continue // offline during perf's run (another test's hotplug)
		}
		t.Logf("CPU %d: %.6g to %.6g TSC cycles/s, perf stat %.6g", cpu, low, high, p)
		if high < 0.98*p || low > 1.02*p {
			t.Errorf("CPU %d: %.6g to %.6g TSC cycles/s, perf stat counted %.6g a second of its enabled time\n%s", cpu, low, high, p, out)
		}
	}
}

// Rate of msr/tsc/ on a CPU is the TSC's frequency: what perf stat counts
// of it on that CPU per second of its enabled time over sleep 1, within
// 2%, over a window of a fifth of that (the kernel's enabled time its
// denominator too).
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
	perfHz := perfStatRates(t, out)[-1]
	t.Logf("CPU %d: Rate %.6g Hz, perf stat %.6g a second", cpu, hz, perfHz)
	if perfHz == 0 || hz < 0.98*perfHz || hz > 1.02*perfHz {
		t.Errorf("CPU %d: Rate %.6g Hz, perf stat counted %.6g a second of its enabled time\n%s", cpu, hz, perfHz, out)
	}
}

// perfStatRates reads perf stat -x, output of msr/tsc/ as counts per
// second of the run time perf prints beside each (its enabled time, in
// ns): by CPU with -A ("CPU0,count,unit,event,run_ns,percent,..."), at
// CPU -1 without ("count,unit,event,run_ns,percent,...").
func perfStatRates(t *testing.T, out []byte) map[int]float64 {
	t.Helper()
	rates := map[int]float64{}
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		f := strings.Split(line, ",")
		cpu := -1
		if strings.HasPrefix(f[0], "CPU") {
			n, err := strconv.Atoi(strings.TrimPrefix(f[0], "CPU"))
			if err != nil {
				continue
			}
			cpu, f = n, f[1:]
		}
		if len(f) < 5 || !strings.HasPrefix(f[2], "msr/tsc") {
			continue
		}
		count, err1 := strconv.ParseFloat(f[0], 64)
		ns, err2 := strconv.ParseFloat(f[3], 64)
		if err1 != nil || err2 != nil || ns <= 0 {
			t.Fatalf("perf stat line %q: count or run time unreadable", line)
		}
		rates[cpu] = count / (ns / 1e9)
	}
	return rates
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
	// x86's msr PMU has it (this project's Intel and AMD guests too); under
	// PMU_EXPORTER_CI its absence is a failure, not a skip.
	testenv.Require(tb, len(tsc) > 0, "no msr/tsc/ PMU event on this host")
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
