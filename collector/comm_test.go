package collector

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/model"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// The comm collector samples accesses with the host's precise PMU where it
// has one (a precise source wins), each sample decoded for its width, and
// with the timer address sampler elsewhere.
func TestCommConfigsPreferPrecise(t *testing.T) {
	flags := samplingFlags{period: 10007, ldlat: 30}
	taken := samplingFlags{period: 10007, ldlat: 30, enabled: true, spe: true}
	for _, c := range []struct {
		name   string
		host   fixture.Host
		flags  samplingFlags
		source string
		events []string
	}{
		{"skylake", fixture.IntelSkylake(), taken, "pebs", []string{"mem-loads", "mem-stores"}},
		{"zen3", fixture.AMDZen3(), taken, "ibs", []string{"ibs_op"}},
		{"no PMU", fixture.NoPMU(), flags, "decode", []string{"cpu-clock"}},
		// SPE admits one event per CPU: the sampling collector's, where it
		// takes it.
		{"neoverse, sampling collector off", fixture.ArmNeoverseN1(), samplingFlags{period: 10007, spe: true}, "spe", []string{"arm_spe"}},
		{"neoverse, SPE left to others", fixture.ArmNeoverseN1(), flags, "decode", []string{"cpu-clock"}},
		{"neoverse, SPE the sampling collector's", fixture.ArmNeoverseN1(), taken, "decode", []string{"cpu-clock"}},
	} {
		cfgs, source, err := commConfigs(fixture.PMUs(t, c.host), 1e6, c.flags, true)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var names []string
		for _, cfg := range cfgs {
			names = append(names, cfg.Name)
			if !cfg.Decode || cfg.SampleType&sampling.Cgroup == 0 {
				t.Errorf("%s: %s is not decoded, or lacks the cgroup: %+v", c.name, cfg.Name, cfg)
			}
			if source != "decode" && (!cfg.Memory || cfg.Period != max(cfg.Align(10007), 16)) {
				t.Errorf("%s: %s: want a memory event at the sampling period: %+v", c.name, cfg.Name, cfg)
			}
		}
		if source != c.source || len(names) != len(c.events) || names[0] != c.events[0] {
			t.Errorf("%s: %s %v, want %s %v", c.name, source, names, c.source, c.events)
		}
	}
}

// --collector.comm.reuse-clock resolves perf syntax against the host's
// PMUs: a software event anywhere; Intel's retired loads and stores
// (MEM_INST_RETIRED.ALL_LOADS, ALL_STORES: event 0xd0, umasks 0x81 and
// 0x82) on the core PMU; refused where one name is an event per core PMU
// (a hybrid CPU) or names nothing.
func TestReuseClockEvents(t *testing.T) {
	if attrs, err := reuseClockEvents("", fixture.PMUs(t, fixture.NoPMU())); attrs != nil || err != nil {
		t.Errorf("no clock: %v, %v", attrs, err)
	}
	attrs, err := reuseClockEvents("context-switches", fixture.PMUs(t, fixture.NoPMU()))
	if err != nil || len(attrs) != 1 || attrs[0].Type != unix.PERF_TYPE_SOFTWARE || attrs[0].Config != unix.PERF_COUNT_SW_CONTEXT_SWITCHES {
		t.Errorf("context-switches: %+v, %v", attrs, err)
	}
	skx := fixture.PMUs(t, fixture.IntelSkylake())
	attrs, err = reuseClockEvents("cpu/event=0xd0,umask=0x81/+cpu/event=0xd0,umask=0x82/", skx)
	if err != nil || len(attrs) != 2 || attrs[0].Type != unix.PERF_TYPE_RAW || attrs[0].Config != 0x81d0 || attrs[1].Config != 0x82d0 || attrs[0].Read_format != 0 {
		t.Errorf("loads+stores on Skylake: %+v, %v", attrs, err)
	}
	if _, err := reuseClockEvents("instructions", fixture.PMUs(t, fixture.IntelAlderLake())); err == nil || !strings.Contains(err.Error(), "hybrid") {
		t.Errorf("instructions on a hybrid CPU: %v, want refused", err)
	}
	if _, err := reuseClockEvents("nosuch/event=1/", skx); err == nil {
		t.Error("a PMU that does not exist: no error")
	}
}

// pmuv3WithoutMemAccess is a PMUv3 that does not implement MEM_ACCESS,
// as QEMU's arm64 CPU: the kernel leaves it out of the PMU's events.
func pmuv3WithoutMemAccess() fixture.Host {
	h := fixture.ArmNeoverseN1()
	delete(h, "sys/bus/event_source/devices/armv8_pmuv3_0/events/mem_access")
	return h
}

// --collector.comm.reuse-clock=accesses names the host's loads and stores
// (the encodings of Intel's, AMD's and Arm's event lists), resolved on
// its fixture's core PMU; a hybrid CPU and a host without a PMU refuse.
func TestAccessClock(t *testing.T) {
	for _, c := range []struct {
		name    string
		host    fixture.Host
		cpu     host.CPU
		configs []uint64
	}{
		{"skylake", fixture.IntelSkylake(), host.CPU{Vendor: "GenuineIntel", Family: "6"}, []uint64{0x81d0, 0x82d0}},
		{"zen3", fixture.AMDZen3(), host.CPU{Vendor: "AuthenticAMD", Family: "25"}, []uint64{0x0729}},
		{"neoverse-n1", fixture.ArmNeoverseN1(), host.CPU{Vendor: "0x41", Family: ""}, []uint64{0x13}},
		{"pmuv3 without mem_access", pmuv3WithoutMemAccess(), host.CPU{Vendor: "0x00", Family: ""}, nil},
		{"alder lake", fixture.IntelAlderLake(), host.CPU{Vendor: "GenuineIntel", Family: "6"}, nil},
		{"no PMU", fixture.NoPMU(), host.CPU{Vendor: "AuthenticAMD", Family: "25"}, nil},
	} {
		pmus := fixture.PMUs(t, c.host)
		spec, err := accessClock(c.cpu, pmus)
		if c.configs == nil {
			if err == nil {
				t.Errorf("%s: %s, want refused", c.name, spec)
			}
			continue
		}
		attrs, err2 := reuseClockEvents(spec, pmus)
		if err != nil || err2 != nil || len(attrs) != len(c.configs) {
			t.Fatalf("%s: %s: %+v, %v, %v", c.name, spec, attrs, err, err2)
		}
		for i, a := range attrs {
			if a.Config != c.configs[i] || a.Type == unix.PERF_TYPE_SOFTWARE {
				t.Errorf("%s: event %d config %#x type %d, want %#x on the core PMU", c.name, i, a.Config, a.Type, c.configs[i])
			}
		}
	}
}

// access_counting: available where the host's loads and stores events
// resolve and open (each opened by the probe, which a fixture cannot do:
// the probe here stands in for perf_event_open), else why not, with the
// hardware counters' fix where no core PMU exists.
func TestAccessCounting(t *testing.T) {
	hw := capability.Feature{Name: capability.HardwareCounters, Fix: "enable the virtual PMU"}
	var opened []uint64
	open := func(a eventspec.Attr) error { opened = append(opened, a.Config); return nil }
	f := accessCounting(host.CPU{Vendor: "GenuineIntel", Family: "6"}, fixture.PMUs(t, fixture.IntelSkylake()), hw, open)
	if !f.Available || !strings.Contains(f.Detail, "event=0xd0,umask=0x81") || !slices.Equal(opened, []uint64{0x81d0, 0x82d0}) {
		t.Errorf("skylake: %+v, opened %#x", f, opened)
	}
	refuse := func(eventspec.Attr) error { return unix.ENOENT }
	f = accessCounting(host.CPU{Vendor: "AuthenticAMD", Family: "25"}, fixture.PMUs(t, fixture.AMDZen3()), hw, refuse)
	if f.Available || !strings.Contains(f.Reason, "event=0x29,umask=0x7") || !strings.Contains(f.Reason, unix.ENOENT.Error()) {
		t.Errorf("zen3, refused: %+v", f)
	}
	f = accessCounting(host.CPU{Vendor: "AuthenticAMD", Family: "25"}, fixture.PMUs(t, fixture.NoPMU()), hw, open)
	if f.Available || !strings.Contains(f.Reason, "no core PMU") || !strings.Contains(f.Reason, "in the thread's CPU time") || f.Fix != hw.Fix {
		t.Errorf("no PMU: %+v", f)
	}
	hw.Available = true
	f = accessCounting(host.CPU{Vendor: "AuthenticAMD", Family: "22"}, fixture.PMUs(t, fixture.AMDZen3()), hw, open)
	if f.Available || !strings.Contains(f.Reason, "in retired instructions") || !strings.Contains(f.Fix, "accesses=EVENT+EVENT") {
		t.Errorf("amd family 16h: %+v", f)
	}
	f = accessCounting(host.CPU{Vendor: "GenuineIntel", Family: "6"}, fixture.PMUs(t, fixture.IntelAlderLake()), hw, open)
	if f.Available || !strings.Contains(f.Reason, "hybrid") || !strings.Contains(f.Fix, "accesses=PMU/EVENT/") {
		t.Errorf("alder lake: %+v", f)
	}
	f = accessCounting(host.CPU{Vendor: "AuthenticAMD", Family: "25"}, fixture.PMUs(t, fixture.AMDZen3()), hw, refuse)
	if f.Available || !strings.Contains(f.Fix, "perf stat -e cpu/event=0x29,umask=0x7/ true") {
		t.Errorf("zen3 with counters, refused: %+v", f)
	}
}

// --collector.comm.reuse-clock=accesses takes the best clock the host
// counts: loads and stores, else retired instructions on a core PMU whose
// loads and stores events are not known (an AMD core before Zen here),
// else the thread's CPU time (no core PMU, or a hybrid CPU).
func TestBestReuseClock(t *testing.T) {
	open := func(eventspec.Attr) error { return nil }
	// QEMU's arm64 without -icount: cycles count, instructions do not.
	noInstructions := func(a eventspec.Attr) error {
		if a.Type == unix.PERF_TYPE_HARDWARE && a.Config == unix.PERF_COUNT_HW_INSTRUCTIONS {
			return unix.ENOENT
		}
		return nil
	}
	refuse := func(eventspec.Attr) error { return unix.ENOENT }
	for _, c := range []struct {
		name       string
		host       fixture.Host
		cpu        host.CPU
		probe      func(eventspec.Attr) error
		spec, unit string
	}{
		{"skylake", fixture.IntelSkylake(), host.CPU{Vendor: "GenuineIntel", Family: "6"}, open, "cpu/event=0xd0,umask=0x81/+cpu/event=0xd0,umask=0x82/", "accesses"},
		{"skylake, refused", fixture.IntelSkylake(), host.CPU{Vendor: "GenuineIntel", Family: "6"}, refuse, "", ""},
		{"amd family 16h", fixture.AMDZen3(), host.CPU{Vendor: "AuthenticAMD", Family: "22"}, open, "instructions", "instructions"},
		{"neoverse-n1", fixture.ArmNeoverseN1(), host.CPU{Vendor: "0x41"}, open, "armv8_pmuv3_0/event=0x13/", "accesses"},
		{"pmuv3 without mem_access", pmuv3WithoutMemAccess(), host.CPU{Vendor: "0x00"}, open, "instructions", "instructions"},
		{"pmuv3 without mem_access or instructions", pmuv3WithoutMemAccess(), host.CPU{Vendor: "0x00"}, noInstructions, "", ""},
		{"alder lake", fixture.IntelAlderLake(), host.CPU{Vendor: "GenuineIntel", Family: "6"}, open, "", ""},
		{"no PMU", fixture.NoPMU(), host.CPU{Vendor: "AuthenticAMD", Family: "25"}, open, "", ""},
	} {
		pmus := fixture.PMUs(t, c.host)
		spec, unit, why := bestReuseClock(c.cpu, pmus, c.probe)
		if spec != c.spec || unit != c.unit || (unit != "accesses") != (why != nil) {
			t.Errorf("%s: %q in %q (%v), want %q in %q", c.name, spec, unit, why, c.spec, c.unit)
		}
		if unit == "instructions" {
			attrs, err := reuseClockEvents(spec, pmus)
			if err != nil || len(attrs) != 1 || attrs[0].Type != unix.PERF_TYPE_HARDWARE || attrs[0].Config != unix.PERF_COUNT_HW_INSTRUCTIONS {
				t.Errorf("%s: %s is %+v, %v; want the generic instructions event", c.name, spec, attrs, err)
			}
		}
	}
}

// What each annotation value makes of a pod's debug registers: "true" the
// node's flags, "watchpoints" and "reuse" the pod's choice, anything else
// no selection (said once per pod and value, never for "false"); where no
// watchpoints work, the pods that chose them are sampled without.
func TestAnnotatedPodsChooseRegisters(t *testing.T) {
	var log strings.Builder
	c := &commSamplers{b: &build{log: slog.New(slog.NewTextHandler(&log, nil))}, nodeRegs: model.RegistersComm, watchpoints: true, said: map[string]string{}}
	values := map[string]string{"a": "true", "b": "watchpoints", "c": "reuse", "d": "false", "e": "Reuse"}
	got := c.annotatedPods(values)
	want := map[string]model.Registers{"a": model.RegistersComm, "b": model.RegistersComm, "c": model.RegistersReuse}
	if !maps.Equal(got, want) {
		t.Errorf("registers by pod %v, want %v", got, want)
	}
	c.annotatedPods(values) // the same values again: nothing new to say
	if n := strings.Count(log.String(), "pod not selected"); n != 1 || !strings.Contains(log.String(), `value=Reuse`) {
		t.Errorf("said %d times that a pod is not selected, want once (for pod e's value Reuse):\n%s", n, log.String())
	}
	c.watchpoints = false
	c.nodeRegs = model.RegistersReuse
	got = c.annotatedPods(values)
	want = map[string]model.Registers{"a": model.RegistersNone, "b": model.RegistersNone, "c": model.RegistersNone}
	if !maps.Equal(got, want) {
		t.Errorf("without watchpoints: registers by pod %v, want sampling alone for the three selected", got)
	}
	delete(values, "e")
	c.annotatedPods(values)
	if _, ok := c.said["e"]; ok {
		t.Errorf("a pod gone is still remembered: %v", c.said)
	}
}

// check says what serve would sample on a Neoverse: SPE, or why not.
func TestCheckSamplingSPE(t *testing.T) {
	s := setup{pmus: fixture.PMUs(t, fixture.ArmNeoverseN1())}
	if st := checkSampling(samplingFlags{period: 10007, spe: true}, s); !slices.Equal(st.Events, []string{"arm_spe_0/arm_spe"}) || len(st.Missing) != 0 {
		t.Errorf("SPE on: %+v", st)
	}
	st := checkSampling(samplingFlags{period: 10007}, s)
	if len(st.Events) != 0 || len(st.Missing) != 1 || st.Missing[0].What != "arm_spe_0" || !strings.Contains(st.Missing[0].Why, "--no-collector.sampling.spe") {
		t.Errorf("SPE off: %+v", st)
	}
}
