package sampling

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// perfmonEvent finds an event of Intel's perfmon JSON.
func perfmonEvent(t *testing.T, file, name string) reference.Event {
	t.Helper()
	for _, e := range reference.Events(t, filepath.Join(reference.Dir(t), "intel-perfmon", file)) {
		if e.EventName == name {
			return e
		}
	}
	t.Fatalf("%s: no %s", file, name)
	return reference.Event{}
}

func hexv(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// On Skylake and Sapphire Rapids the plan samples exactly Intel's
// MEM_TRANS_RETIRED.LOAD_LATENCY_GT_32 (event, umask, and the threshold in
// MSR 0x3F6, which perf's ldlat term writes through config1) and
// MEM_INST_RETIRED.ALL_STORES, at precise_ip 3; Sapphire Rapids' loads get
// the mem-loads-aux leader.
func TestPlanIntelMatchesPerfmon(t *testing.T) {
	for _, c := range []struct {
		host fixture.Host
		file string
		aux  bool
	}{
		{fixture.IntelSkylake(), "SKX/events/skylakex_core.json", false},
		{fixture.IntelSapphireRapids(), "SPR/events/sapphirerapids_core.json", true},
	} {
		cfgs, missing, err := Plan(fixture.PMUs(t, c.host), Options{Period: 10007, LdLat: 32})
		if err != nil || len(missing) != 0 || len(cfgs) != 2 {
			t.Fatalf("%s: %+v %+v %v", c.file, cfgs, missing, err)
		}
		ld, st := perfmonEvent(t, c.file, "MEM_TRANS_RETIRED.LOAD_LATENCY_GT_32"), perfmonEvent(t, c.file, "MEM_INST_RETIRED.ALL_STORES")
		l, s := cfgs[0], cfgs[1]
		if l.Attr.Config != hexv(t, ld.UMask)<<8|hexv(t, ld.EventCode) || l.Attr.Config1 != 0x20 || l.Attr.PreciseIP != 3 || l.Attr.Type != 4 {
			t.Errorf("%s mem-loads %+v, perfmon %+v", c.file, l.Attr, ld)
		}
		if s.Attr.Config != hexv(t, st.UMask)<<8|hexv(t, st.EventCode) || s.Attr.PreciseIP != 3 || s.SampleType&WeightStruct != 0 {
			t.Errorf("%s mem-stores %+v, perfmon %+v", c.file, s.Attr, st)
		}
		if (l.Leader != nil) != c.aux || l.SampleType&unix.PERF_SAMPLE_DATA_SRC == 0 || l.SampleType&WeightStruct == 0 || !l.Memory {
			t.Errorf("%s: leader %v, sample_type %#x", c.file, l.Leader, l.SampleType)
		}
		if c.aux && l.Leader.Config != 0x8203 {
			t.Errorf("mem-loads-aux config %#x, want the kernel's 0x8203", l.Leader.Config)
		}
	}
}

// Hybrid: each core type samples on its own CPUs.
func TestPlanHybrid(t *testing.T) {
	cfgs, _, err := Plan(fixture.PMUs(t, fixture.IntelAlderLake()), Options{Period: 1000, LdLat: 30})
	if err != nil {
		t.Fatal(err)
	}
	cpus := map[string]string{}
	for _, c := range cfgs {
		cpus[c.PMU+"/"+c.Name] = strconv.Itoa(len(c.CPUs)) + ":" + strconv.Itoa(c.CPUs[0])
	}
	if cpus["cpu_core/mem-loads"] != "4:0" || cpus["cpu_atom/mem-loads"] != "4:4" || len(cfgs) != 4 {
		t.Errorf("%v", cpus)
	}
}

func TestPlanAMDArmNone(t *testing.T) {
	cfgs, missing, err := Plan(fixture.PMUs(t, fixture.AMDZen3()), Options{Period: 10007, LdLat: 30, Cgroup: true})
	if err != nil || len(cfgs) != 1 || len(missing) != 0 {
		t.Fatalf("%+v %+v %v", cfgs, missing, err)
	}
	if c := cfgs[0]; c.Name != "ibs_op" || c.Attr.Type != 11 || c.Attr.Config != 1<<19 || !c.AddrOnly || c.Period != 10016 || c.Align(10017) != 10032 || c.SampleType&Cgroup == 0 {
		t.Errorf("ibs_op %+v", c)
	}
	// Arm SPE: loads and stores, timed and jittered (config bits 33, 34,
	// 0 and 16 of the fixture's formats, from the kernel's driver), on its
	// cpumask, every multiple of 256 ops at or above caps/min_interval.
	for period, want := range map[uint64]uint64{100: 1024, 1000: 1024, 5000: 5120, 1 << 20: 1 << 20} {
		cfgs, missing, err := Plan(fixture.PMUs(t, fixture.ArmNeoverseN1()), Options{Period: period, Cgroup: true})
		if err != nil || len(missing) != 0 || len(cfgs) != 1 {
			t.Fatalf("SPE: %+v %+v %v", cfgs, missing, err)
		}
		c := cfgs[0]
		if c.Name != "arm_spe" || c.Attr.Type != 9 || c.Attr.Config != 1<<33|1<<34|1|1<<16 || c.Attr.Config1 != 0 || c.Attr.Config2 != 0 ||
			!c.Aux || !c.Memory || c.SampleType != AuxSampleType|Cgroup || c.Period != want || !slices.Equal(c.CPUs, []int{0, 1, 2, 3}) || c.Source() != "spe" {
			t.Errorf("SPE every %d: %+v", period, c)
		}
	}
	// Left to others: a reason, no config.
	cfgs, missing, err = Plan(fixture.PMUs(t, fixture.ArmNeoverseN1()), Options{Period: 1000, NoSPE: true, Why: "held by another"})
	if err != nil || len(cfgs) != 0 || len(missing) != 1 || missing[0].What != "arm_spe_0" || missing[0].Why != "held by another" {
		t.Errorf("SPE left alone: %+v %+v %v", cfgs, missing, err)
	}
	cfgs, missing, err = Plan(fixture.PMUs(t, fixture.NoPMU()), Options{Period: 1, Events: []string{"page-faults"}})
	if err != nil || len(missing) != 1 || len(cfgs) != 1 || cfgs[0].Memory || cfgs[0].Attr.Type != unix.PERF_TYPE_SOFTWARE ||
		cfgs[0].SampleType&unix.PERF_SAMPLE_PERIOD != 0 {
		t.Errorf("no PMU: %+v %+v %v", cfgs, missing, err)
	}
	if _, _, err := Plan(fixture.PMUs(t, fixture.NoPMU()), Options{Events: []string{"page-fualts"}}); err == nil || !strings.Contains(err.Error(), "--collector.sampling.event") {
		t.Errorf("bad spec: %v", err)
	}
}

func TestGovernor(t *testing.T) {
	g := NewGovernor(0.01, 10000) // 1% of a CPU; at most 5000 samples/s per CPU aimed at
	sec := time.Second
	for name, c := range map[string]struct {
		iv   Interval
		want uint64
	}{
		// 20000 samples/s on each of 2 CPUs: 4× the target, period ×4.
		"rate": {Interval{Period: 100, Base: 100, Samples: 40000, CPUs: 2, Elapsed: sec}, 400},
		// 3% CPU for this event: ×3.
		"cpu": {Interval{Period: 100, Base: 100, Samples: 100, CPUs: 1, Elapsed: sec, CPUTime: 30 * time.Millisecond, Share: 1}, 300},
		// Both exceeded: the larger factor.
		"both": {Interval{Period: 100, Base: 100, Samples: 60000, CPUs: 2, Elapsed: sec, CPUTime: 20 * time.Millisecond, Share: 0.5}, 600},
		// Well under both: halve toward the base, not past it.
		"relax": {Interval{Period: 1000, Base: 300, Samples: 100, CPUs: 1, Elapsed: sec}, 500},
		"floor": {Interval{Period: 400, Base: 300, Samples: 100, CPUs: 1, Elapsed: sec}, 300},
		// In between: hold.
		"hold":    {Interval{Period: 1000, Base: 100, Samples: 3000, CPUs: 1, Elapsed: sec}, 1000},
		"no time": {Interval{Period: 1000, Base: 100}, 1000},
	} {
		if got := g.Next(c.iv); got != c.want {
			t.Errorf("%s: period %d, want %d", name, got, c.want)
		}
	}
}
