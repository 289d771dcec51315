package eventspec

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

func TestResolve(t *testing.T) {
	skl := fixture.PMUs(t, fixture.IntelSkylake())
	icl := fixture.PMUs(t, fixture.IntelIcelake())
	amd := fixture.PMUs(t, fixture.AMDZen3())
	arm := fixture.PMUs(t, fixture.ArmNeoverseN1())
	none := fixture.PMUs(t, fixture.NoPMU())
	cases := []struct {
		pmus []*pmu.PMU
		spec string
		want Event // Spec is filled from the case
	}{
		// Generic events: type and config numbers from perf_event.h.
		{skl, "cycles", Event{Name: "cycles", PMU: "cpu", Attr: Attr{Type: 0, Config: 0}, Scale: 1}},
		{skl, "instructions:u", Event{Name: "instructions:u", PMU: "cpu", Attr: Attr{Type: 0, Config: 1, ExcludeKernel: true, ExcludeHV: true}, Scale: 1}},
		{skl, "ref-cycles:k", Event{Name: "ref-cycles:k", PMU: "cpu", Attr: Attr{Type: 0, Config: 9, ExcludeUser: true, ExcludeHV: true}, Scale: 1}},
		{none, "cpu-clock", Event{Name: "cpu-clock", PMU: "software", Attr: Attr{Type: 1, Config: 0}, Scale: 1}},
		{none, "cgroup-switches", Event{Name: "cgroup-switches", PMU: "software", Attr: Attr{Type: 1, Config: 11}, Scale: 1}},
		{none, "cs", Event{Name: "cs", PMU: "software", Attr: Attr{Type: 1, Config: 3}, Scale: 1}},
		// L1-dcache(0) | read(0)<<8 | miss(1)<<16; LLC(2) | write(1)<<8 | access(0)<<16.
		{skl, "L1-dcache-load-misses", Event{Name: "L1-dcache-load-misses", PMU: "cpu", Attr: Attr{Type: 3, Config: 0x10000}, Scale: 1}},
		{skl, "LLC-stores", Event{Name: "LLC-stores", PMU: "cpu", Attr: Attr{Type: 3, Config: 0x102}, Scale: 1}},
		{skl, "dTLB-prefetch-misses", Event{Name: "dTLB-prefetch-misses", PMU: "cpu", Attr: Attr{Type: 3, Config: 0x10203}, Scale: 1}},
		// IA32_PERFEVTSEL: event 0x3c, umask 0, edge bit 18, cmask 1 at 24-31.
		{skl, "cpu/event=0x3c,umask=0x0,cmask=1,edge/", Event{Name: "cpu/event=0x3c,umask=0x0,cmask=1,edge/", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x0104003c}, Scale: 1}},
		{skl, "cpu/event=0xcd,umask=0x1,ldlat=30,name=loads/pp", Event{Name: "loads", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x1cd, Config1: 30, PreciseIP: 2}, Scale: 1}},
		// An alias, then an explicit term overriding one of its values.
		{skl, "cpu/mem-loads,ldlat=64/", Event{Name: "cpu/mem-loads,ldlat=64/", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x1cd, Config1: 64}, Scale: 1}},
		{icl, "cpu/topdown-retiring/", Event{Name: "cpu/topdown-retiring/", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x8000}, Scale: 1}},
		{icl, "topdown-be-bound", Event{Name: "topdown-be-bound", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x8300}, Scale: 1}},
		{skl, "r01c2", Event{Name: "r01c2", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x1c2}, Scale: 1}},
		{skl, "cycles:GH", Event{Name: "cycles:GH", PMU: "cpu", Attr: Attr{Type: 0}, Scale: 1}},
		{skl, "cycles:G", Event{Name: "cycles:G", PMU: "cpu", Attr: Attr{Type: 0, ExcludeHost: true}, Scale: 1}},
		{skl, "cycles:Dppp", Event{Name: "cycles:Dppp", PMU: "cpu", Attr: Attr{Type: 0, Pinned: true, PreciseIP: 3}, Scale: 1}},
		// AMD: a 12-bit event select splits across 0-7 and 32-35.
		{amd, "cpu/event=0x1c7/", Event{Name: "cpu/event=0x1c7/", PMU: "cpu", Attr: Attr{Type: 4, Config: 0x1_0000_00c7}, Scale: 1}},
		{amd, "ibs_op//", Event{Name: "ibs_op//", PMU: "ibs_op", Attr: Attr{Type: 11}, Scale: 1}},
		{amd, "ibs_op/cnt_ctl=1,swfilt/", Event{Name: "ibs_op/cnt_ctl=1,swfilt/", PMU: "ibs_op", Attr: Attr{Type: 11, Config: 1 << 19, Config2: 1}, Scale: 1}},
		{amd, "amd_l3/event=0x4,umask=0xff/", Event{Name: "amd_l3/event=0x4,umask=0xff/", PMU: "amd_l3", Attr: Attr{Type: 12, Config: 0xff04}, CPUs: []int{0}, Scale: 1}},
		// Arm: generic names go to the PMUv3 PMU; aliases resolve through events/.
		{arm, "cycles", Event{Name: "cycles", PMU: "armv8_pmuv3_0", Attr: Attr{Type: 0}, Scale: 1}},
		{arm, "stall_backend", Event{Name: "stall_backend", PMU: "armv8_pmuv3_0", Attr: Attr{Type: 8, Config: 0x24}, CPUs: []int{0, 1, 2, 3}, Scale: 1}},
		{arm, "armv8_pmuv3_0/event=0x11,long/", Event{Name: "armv8_pmuv3_0/event=0x11,long/", PMU: "armv8_pmuv3_0", Attr: Attr{Type: 8, Config: 0x11, Config1: 1}, CPUs: []int{0, 1, 2, 3}, Scale: 1}},
		{arm, "arm_spe_0/ts_enable=1,load_filter=1,min_latency=0x20/", Event{Name: "arm_spe_0/ts_enable=1,load_filter=1,min_latency=0x20/", PMU: "arm_spe_0", Attr: Attr{Type: 9, Config: 1 | 1<<33, Config2: 0x20}, CPUs: []int{0, 1, 2, 3}, Scale: 1}},
	}
	for _, c := range cases {
		got, err := Resolve(c.spec, c.pmus)
		if err != nil {
			t.Errorf("Resolve(%q): %v", c.spec, err)
			continue
		}
		c.want.Spec = c.spec
		if len(got) != 1 || !reflect.DeepEqual(got[0], c.want) {
			t.Errorf("Resolve(%q) =\n  %+v\nwant\n  %+v", c.spec, got, c.want)
		}
	}
}

func TestResolveHybridExpandsPerCorePMU(t *testing.T) {
	adl := fixture.PMUs(t, fixture.IntelAlderLake())
	got, err := Resolve("instructions", adl)
	if err != nil {
		t.Fatal(err)
	}
	// PERF_TYPE_HARDWARE with the PMU type in config[63:32] (PERF_PMU_TYPE_SHIFT).
	want := []Event{
		{Spec: "instructions", Name: "instructions", PMU: "cpu_atom", Attr: Attr{Type: 0, Config: 10<<32 | 1}, CPUs: []int{4, 5, 6, 7}, Scale: 1},
		{Spec: "instructions", Name: "instructions", PMU: "cpu_core", Attr: Attr{Type: 0, Config: 4<<32 | 1}, CPUs: []int{0, 1, 2, 3}, Scale: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// The atom PMU's own topdown-retiring alias is a different event than the core's.
	td, err := Resolve("topdown-retiring", adl)
	if err != nil || len(td) != 2 || td[0].Attr.Config != 0xc2 || td[1].Attr.Config != 0x8000 {
		t.Errorf("topdown-retiring on hybrid = %+v, %v", td, err)
	}
}

func TestResolveErrorsNameWhatAndWhere(t *testing.T) {
	skl := fixture.PMUs(t, fixture.IntelSkylake())
	cases := []struct{ spec, want string }{
		{"cpu/evnt=0x3c/", `unknown term "evnt" for PMU cpu; it accepts: any, cmask, config, config1, config2, edge, event, frontend, in_tx, in_tx_cp, inv, ldlat, name, offcore_rsp, pc, umask`},
		{"cpu/umask=0x100/", "term umask: value 0x100 does not fit in 8 bits (config:8-15)"},
		{"foo/event=1/", `no PMU named "foo" on this host; PMUs here: breakpoint, cpu, software, tracepoint`},
		{"cyclez", `unknown event "cyclez"; did you mean "cycles"?`},
		{"cycles:x", `unknown modifier 'x'`},
		{"cycles:pppp", "precise level 4"},
		{"cpu/event=0x3c", "missing closing '/'"},
		{"cpu/event=zz/", `term event: value "zz" is not a number`},
		{"cpu/event=/", "term \"event\" has no value"},
		{"cpu/event=1,period=1000/", "for sampling"},
		{"sched:sched_switch:u", "more than one ':'"},
		{"", "empty event"},
	}
	for _, c := range cases {
		_, err := Resolve(c.spec, skl)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), fmt.Sprintf("event %q: ", c.spec)) {
			t.Errorf("Resolve(%q) error = %v; want it to name the spec and contain %q", c.spec, err, c.want)
		}
	}
}

func hexval(t *testing.T, s string) uint64 {
	t.Helper()
	if s == "" {
		return 0
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("reference value %q: %v", s, err)
	}
	return v
}

// TestIntelReferenceEncodings encodes every programmable Skylake-SP core event from
// Intel's perfmon JSON through the cpu PMU's format files and checks the config word
// against the IA32_PERFEVTSELx layout in the Intel SDM (vol. 3B, 20.2.1):
// EventSelect[7:0] UMask[15:8] E[18] AnyThread[21] INV[23] CMASK[31:24].
func TestIntelReferenceEncodings(t *testing.T) {
	dir := reference.Dir(t)
	skl := fixture.PMUs(t, fixture.IntelSkylake())
	n := 0
	for _, e := range reference.Events(t, filepath.Join(dir, "intel-perfmon/SKX/events/skylakex_core.json")) {
		if strings.HasPrefix(e.Counter, "Fixed") || strings.Contains(e.EventCode, ",") {
			continue
		}
		ev, um, cm := hexval(t, e.EventCode), hexval(t, e.UMask), hexval(t, e.CounterMask)
		inv, edge, any := hexval(t, e.Invert), hexval(t, e.EdgeDetect), hexval(t, e.AnyThread)
		spec := fmt.Sprintf("cpu/event=%s,umask=%s,cmask=%d,inv=%d,edge=%d,any=%d,name=%s/", e.EventCode, e.UMask, cm, inv, edge, any, e.EventName)
		got, err := Resolve(spec, skl)
		if err != nil {
			t.Fatalf("%s: %v", e.EventName, err)
		}
		want := ev | um<<8 | edge<<18 | any<<21 | inv<<23 | cm<<24
		if got[0].Attr.Config != want || got[0].Attr.Type != 4 || got[0].Name != e.EventName {
			t.Errorf("%s: config %#x, want %#x", e.EventName, got[0].Attr.Config, want)
		}
		n++
	}
	if n < 300 {
		t.Errorf("only %d Skylake-SP events checked; the reference file looks truncated", n)
	}
}

// TestAMDReferenceEncodings checks Zen 3 events against the PERF_CTL layout in AMD's
// PPR: EventSelect[7:0] at bits 7:0, EventSelect[11:8] at bits 35:32, UnitMask at 15:8.
func TestAMDReferenceEncodings(t *testing.T) {
	dir := reference.Dir(t)
	amd := fixture.PMUs(t, fixture.AMDZen3())
	n, extended := 0, 0
	for _, file := range []string{"core.json", "branch.json", "cache.json", "memory.json"} {
		for _, e := range reference.Events(t, filepath.Join(dir, "linux-pmu-events/x86/amdzen3", file)) {
			if e.EventCode == "" {
				continue
			}
			code, um := hexval(t, e.EventCode), hexval(t, e.UMask)
			got, err := Resolve(fmt.Sprintf("cpu/event=%s,umask=%#x/", e.EventCode, um), amd)
			if err != nil {
				t.Fatalf("%s: %v", e.EventName, err)
			}
			want := code&0xff | um<<8 | (code>>8)<<32
			if got[0].Attr.Config != want {
				t.Errorf("%s: config %#x, want %#x", e.EventName, got[0].Attr.Config, want)
			}
			if code > 0xff {
				extended++
			}
			n++
		}
	}
	if n < 100 || extended == 0 {
		t.Errorf("checked %d events (%d with EventSelect > 0xff); the reference looks truncated", n, extended)
	}
}

// TestArmReferenceEncodings: PMUv3 common events are the architected event number
// in config[15:0], and a raw rNNNN names the same config.
func TestArmReferenceEncodings(t *testing.T) {
	dir := reference.Dir(t)
	arm := fixture.PMUs(t, fixture.ArmNeoverseN1())
	n := 0
	for _, e := range reference.Events(t, filepath.Join(dir, "linux-pmu-events/arm64/common-and-microarch.json")) {
		code := hexval(t, e.EventCode)
		a, err := Resolve(fmt.Sprintf("armv8_pmuv3_0/event=%s/", e.EventCode), arm)
		if err != nil {
			t.Fatalf("%s: %v", e.EventName, err)
		}
		r, err := Resolve(fmt.Sprintf("r%x", code), arm)
		if err != nil {
			t.Fatalf("%s: %v", e.EventName, err)
		}
		if a[0].Attr.Config != code || r[0].Attr.Config != code || r[0].Attr.Type != a[0].Attr.Type {
			t.Errorf("%s: %+v / %+v, want config %#x", e.EventName, a[0].Attr, r[0].Attr, code)
		}
		n++
	}
	if n < 50 {
		t.Errorf("only %d Arm events checked", n)
	}
}

// FuzzResolve: no input panics, and whatever resolves has a name and PMU label,
// and resolves again to the same events.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"cycles", "cpu/event=0x3c,umask=0x0,cmask=1,edge/", "cpu/topdown-retiring/",
		"ibs_op//", "r01c2", "cycles:u", "L1-dcache-load-misses", "cpu/umask=0x100/", "a/b/c/", ":", "cpu//:ppp",
		"cpu/event=0xffffffffffffffff/", "cpu/config=1,config1=2,config2=3/", "cpu/,/", "cpu/=1/"} {
		f.Add(s)
	}
	sys, _ := fixture.Write(f, fixture.Merge(fixture.IntelIcelake(), fixture.AMDZen3()))
	pmus, err := pmu.Discover(sys)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		evs, err := Resolve(s, pmus)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "event ") {
				t.Fatalf("error without the spec: %v", err)
			}
			return
		}
		for _, e := range evs {
			if e.Name == "" || e.PMU == "" {
				t.Fatalf("%q resolved without labels: %+v", s, e)
			}
		}
		again, err := Resolve(s, pmus)
		if err != nil || !reflect.DeepEqual(again, evs) {
			t.Fatalf("%q resolves differently twice", s)
		}
	})
}

// The kernel's software events and perf's tool events are counted
// without a PMU, with their modifiers too; hardware, cache and raw ones
// are not.
func TestCountsWithoutPMU(t *testing.T) {
	for name, want := range map[string]bool{
		"task-clock": true, "cpu-clock:u": true, " Context-Switches ": true, "duration_time": true, "cgroup-switches": true,
		"cycles": false, "instructions:u": false, "L1-dcache-load-misses": false, "r01c4": false, "cpu/event=0x3c/": false, "": false,
	} {
		if got := CountsWithoutPMU(name); got != want {
			t.Errorf("CountsWithoutPMU(%q) = %v, want %v", name, got, want)
		}
	}
}
