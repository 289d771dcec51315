package pmu_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	. "github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
)

func byName(t *testing.T, pmus []*PMU, name string) *PMU {
	t.Helper()
	for _, p := range pmus {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("PMU %s not discovered", name)
	return nil
}

func TestDiscoverIntelHybrid(t *testing.T) {
	sys, _ := fixture.Write(t, fixture.IntelAlderLake())
	pmus, err := Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	core := byName(t, pmus, "cpu_core")
	atom := byName(t, pmus, "cpu_atom")
	if core.Type != 4 || atom.Type != 10 {
		t.Errorf("types = %d, %d; want 4, 10", core.Type, atom.Type)
	}
	if !reflect.DeepEqual(core.CPUs, []int{0, 1, 2, 3}) || !reflect.DeepEqual(atom.CPUs, []int{4, 5, 6, 7}) {
		t.Errorf("cpus = %v / %v", core.CPUs, atom.CPUs)
	}
	if got := core.Formats["cmask"]; got.Word != 0 || !reflect.DeepEqual(got.Ranges, []BitRange{{24, 31}}) {
		t.Errorf("cmask format = %+v", got)
	}
	if got := core.Formats["ldlat"]; got.Word != 1 || got.Width() != 16 {
		t.Errorf("ldlat format = %+v", got)
	}
	if core.Aliases["topdown-retiring"].Terms != "event=0x00,umask=0x80" {
		t.Errorf("topdown-retiring alias = %+v", core.Aliases["topdown-retiring"])
	}
	if core.Caps["max_precise"] != "3" || core.Caps["pmu_name"] != "alderlake_hybrid" {
		t.Errorf("caps = %v", core.Caps)
	}
	if !core.IsCore() || !atom.IsCore() || byName(t, pmus, "software").IsCore() {
		t.Error("IsCore misclassifies")
	}
	sw := byName(t, pmus, "software")
	if sw.CPUs != nil || len(sw.Formats) != 0 {
		t.Errorf("software PMU = %+v", sw)
	}
}

func TestDiscoverAMDAndArm(t *testing.T) {
	sys, _ := fixture.Write(t, fixture.AMDZen3())
	pmus, err := Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	cpu := byName(t, pmus, "cpu")
	// AMD's 12-bit event select is split: EventSelect[7:0] at 0-7, [11:8] at 32-35.
	got, err := cpu.Formats["event"].Encode(0x1C0)
	if err != nil || got != 0x1_0000_00C0 {
		t.Errorf("encode AMD event 0x1C0 = %#x, %v; want 0x1000000c0", got, err)
	}
	if l3 := byName(t, pmus, "amd_l3"); !reflect.DeepEqual(l3.CPUMask, []int{0}) || l3.IsCore() {
		t.Errorf("amd_l3 = %+v", l3)
	}
	if f := byName(t, pmus, "ibs_op").Formats["swfilt"]; f.Word != 2 {
		t.Errorf("ibs_op swfilt = %+v", f)
	}

	sys, _ = fixture.Write(t, fixture.ArmNeoverseN1())
	pmus, err = Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	arm := byName(t, pmus, "armv8_pmuv3_0")
	if !arm.IsCore() || arm.Caps["slots"] != "0x00000004" || arm.Aliases["stall_backend"].Terms != "event=0x0024" {
		t.Errorf("armv8_pmuv3_0 = %+v", arm)
	}
	if arm.Identifier != "" {
		t.Errorf("armv8_pmuv3_0 identifier %q, want none", arm.Identifier)
	}
	sys, _ = fixture.Write(t, fixture.ArmCMNPlatform())
	pmus, err = Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	if cmn := byName(t, pmus, "arm_cmn_0"); cmn.Identifier != "43401" || !reflect.DeepEqual(cmn.CPUMask, []int{0}) || cmn.Formats["nodeid"].String() != "config:32-47" {
		t.Errorf("arm_cmn_0 = %+v", cmn)
	}
	spe := byName(t, pmus, "arm_spe_0")
	if f := spe.Formats["min_latency"]; f.Word != 2 || f.Width() != 12 {
		t.Errorf("arm_spe_0 min_latency = %+v", f)
	}
}

func TestAliasScaleAndUnit(t *testing.T) {
	h := fixture.Merge(fixture.Common("0"), fixture.Host{
		"sys/bus/event_source/devices/power/type":                    "13\n",
		"sys/bus/event_source/devices/power/format/event":            "config:0-7\n",
		"sys/bus/event_source/devices/power/events/energy-pkg":       "event=0x02\n",
		"sys/bus/event_source/devices/power/events/energy-pkg.scale": "2.3283064365386962890625e-10\n",
		"sys/bus/event_source/devices/power/events/energy-pkg.unit":  "Joules\n",
	})
	sys, _ := fixture.Write(t, h)
	pmus, err := Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	a := byName(t, pmus, "power").Aliases["energy-pkg"]
	if a.Scale != 2.3283064365386962890625e-10 || a.Unit != "Joules" || a.Terms != "event=0x02" {
		t.Errorf("alias = %+v", a)
	}
	if _, ok := byName(t, pmus, "power").Aliases["energy-pkg.scale"]; ok {
		t.Error(".scale file taken for an alias")
	}
}

func TestDiscoverReportsBadPMUButKeepsOthers(t *testing.T) {
	h := fixture.Merge(fixture.Common("0"), fixture.Host{
		"sys/bus/event_source/devices/broken/type":         "not-a-number\n",
		"sys/bus/event_source/devices/badfmt/type":         "20\n",
		"sys/bus/event_source/devices/badfmt/format/event": "config9:0-7\n",
	})
	sys, _ := fixture.Write(t, h)
	pmus, err := Discover(sys)
	if err == nil || !strings.Contains(err.Error(), "PMU broken") || !strings.Contains(err.Error(), "badfmt: format/event") {
		t.Errorf("error = %v; want it to name both broken PMUs", err)
	}
	byName(t, pmus, "software")
	if len(pmus) != 3 {
		t.Errorf("got %d PMUs, want the 3 good ones", len(pmus))
	}
}

func TestDiscoverMissingRoot(t *testing.T) {
	_, err := Discover(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("err = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestFormatEncode(t *testing.T) {
	cases := []struct {
		format string
		value  uint64
		want   uint64
		bad    bool
	}{
		{"config:0-7", 0xc0, 0xc0, false},
		{"config:8-15", 0x41, 0x4100, false},
		{"config:18", 1, 1 << 18, false},
		{"config:24-31", 0xff, 0xff000000, false},
		{"config:0-7,32-35", 0xfff, 0xf_0000_00ff, false},
		{"config1:0-63", ^uint64(0), ^uint64(0), false},
		{"config:0-7", 0x100, 0, true},
		{"config:18", 2, 0, true},
	}
	for _, c := range cases {
		f, err := ParseFormat(c.format)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Encode(c.value)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("%s encode %#x = %#x, %v; want %#x (error %v)", c.format, c.value, got, err, c.want, c.bad)
		}
		if f.String() != c.format {
			t.Errorf("String() = %q, want %q", f.String(), c.format)
		}
	}
	for _, bad := range []string{"config", "config4:1", "config:64", "config:7-3", "config:a"} {
		if _, err := ParseFormat(bad); err == nil {
			t.Errorf("ParseFormat(%q) accepted", bad)
		}
	}
}

// TestDiscoverThisHost reads the real /sys: every host has the software PMU with
// the ABI-fixed type 1.
func TestDiscoverThisHost(t *testing.T) {
	pmus, err := Discover("/sys")
	if err != nil {
		t.Fatal(err)
	}
	if sw := byName(t, pmus, "software"); sw.Type != TypeSoftware {
		t.Errorf("software type = %d", sw.Type)
	}
}
