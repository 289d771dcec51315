package platform

import (
	"math"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
)

// perf stat prints a counter as its count times its sysfs .scale, in its
// .unit (the kernel drivers' files, transcribed in the fixtures); Recorded
// must turn that back into what the live exporter exports, count × Scale,
// for every platform counter of the Intel, AMD (Zen 4 and Zen 5) and Arm
// CMN fixtures, named as perf names it merged (uncore_imc/…/) and not
// (uncore_imc_0/…/).
func TestRecordedUndoesPerfScaling(t *testing.T) {
	hosts := map[string]struct {
		tree   fixture.Host
		family string
	}{
		"intel": {fixture.IntelPlatform(), "6"},
		"amd":   {fixture.AMDPlatform(), "25"},
		"zen5":  {fixture.Merge(fixture.AMDPlatform(), fixture.Host{"sys/bus/event_source/devices/amd_df/cpumask": "0,2\n"}), "26"},
		"cmn":   {fixture.ArmCMNPlatform(), ""},
	}
	for host, h := range hosts {
		pmus := fixture.PMUs(t, h.tree)
		cs, err := Select(pmus, []int{0, 1, 2, 3}, h.family)
		if err != nil {
			t.Fatal(err)
		}
		for _, live := range cs {
			printedScale, unit := 1.0, ""
			for _, p := range pmus {
				if a, ok := p.Aliases[live.Event]; ok && p.Name == live.PMU {
					if a.Scale != 0 {
						printedScale = a.Scale
					}
					unit = a.Unit
				}
			}
			const count = 123456789
			printed := count * printedScale
			merged := strings.TrimRight(strings.TrimRight(live.PMU, "0123456789"), "_")
			for _, name := range []string{live.PMU + "/" + live.Event + "/", merged + "/" + live.Event + "/"} {
				c, toCounter, ok, err := Recorded(name, unit)
				if !ok || err != nil {
					t.Errorf("%s: %s (unit %q) not recognised: ok %v, %v", host, name, unit, ok, err)
					continue
				}
				if c.Kind != live.Kind || c.Name != live.Name || c.Locality != live.Locality {
					t.Errorf("%s: %s recorded as %v %q %q, live %v %q %q", host, name, c.Kind, c.Name, c.Locality, live.Kind, live.Name, live.Locality)
				}
				want := count * live.Scale
				if got := printed * toCounter * c.Scale; math.Abs(got-want) > 1e-9*want {
					t.Errorf("%s: %s printed %v %s: %v in the counter's unit, live exports %v", host, name, printed, unit, got, want)
				}
			}
		}
	}
}

// Events perf knows by name count one 64-byte line each; an event that is
// no platform counter is not one; an energy count printed without
// Joules, or a memory event in an unknown unit, is an error naming it.
func TestRecordedByNameAndRefusals(t *testing.T) {
	c, f, ok, err := Recorded("UNC_CHA_REQUESTS.READS_REMOTE", "")
	if !ok || err != nil || c.Kind != LLCMissBytes || c.Name != "read" || c.Locality != "remote" || f != 64 {
		t.Errorf("UNC_CHA_REQUESTS.READS_REMOTE: %+v ×%v %v %v", c, f, ok, err)
	}
	if c, f, ok, _ := Recorded("umc_cas_cmd.wr", "Bytes"); !ok || c.Kind != MemoryBytes || c.Name != "write" || f != 1 {
		t.Errorf("umc_cas_cmd.wr in Bytes: %+v ×%v", c, f)
	}
	if c, _, ok, _ := Recorded("uncore_cha_3/umask=0x1,event=0x50/", ""); !ok || c.Locality != "local" || c.Name != "read" {
		t.Errorf("terms in another order and spelling: %+v %v", c, ok)
	}
	for _, notOurs := range []string{"cycles", "cpu/event=0x3c/", "uncore_imc_0/clockticks/", "uncore_cha_0/event=0x35/", "msr", "power//"} {
		if _, _, ok, err := Recorded(notOurs, ""); ok || err != nil {
			t.Errorf("%s taken as a platform counter (%v)", notOurs, err)
		}
	}
	for _, bad := range [][2]string{{"power/energy-pkg/", ""}, {"uncore_imc/cas_count_read/", "GiB"}, {"msr/tsc/", "msec"}} {
		if _, _, ok, err := Recorded(bad[0], bad[1]); !ok || err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s in %q: ok %v, err %v", bad[0], bad[1], ok, err)
		}
	}
}

// perf's event list names say what they count: Zen 5's data fabric
// events and link beats, the CMN's requests, and an i.MX 8M part's DDR
// cycles, which name the part and so the bytes a cycle moves (16 on the
// 8M Mini, 8 on the Nano, as their metrics multiply). A DDR controller's
// bare alias does not name the part and is not taken; the CMN's requests
// printed in a unit are an error.
func TestRecordedSystemPMUNames(t *testing.T) {
	for name, want := range map[string]struct {
		kind          Kind
		dir, locality string
		perCount      float64
	}{
		"local_or_remote_socket_read_data_beats_dram_3": {DRAMBytes, "read", "local_or_remote", 64},
		"remote_socket_write_data_beats_dram_11":        {DRAMBytes, "write", "remote", 64},
		"local_socket_inbound_data_beats_link_2":        {XGMIBytes, "receive", "", 64},
		"amd_df/event=0xd5f,umask=0xf3e/":               {XGMIBytes, "transmit", "", 64},
		"hnf_mc_reqs":                                   {MemoryRequests, "sent", "", 1},
		"arm_cmn_1/hnf_mc_retries/":                     {MemoryRequests, "retried", "", 1},
		"imx8mm_ddr.read_cycles":                        {MemoryBytes, "read", "", 16},
		"imx8mn_ddr.write_cycles":                       {MemoryBytes, "write", "", 8},
	} {
		c, f, ok, err := Recorded(name, "")
		if !ok || err != nil || c.Kind != want.kind || c.Name != want.dir || c.Locality != want.locality || f != want.perCount {
			t.Errorf("%s: %+v ×%v %v %v; want %+v", name, c, f, ok, err, want)
		}
	}
	for _, notOurs := range []string{"imx8_ddr0/read-cycles/", "imx8mp_ddr.read_cycles", "imx8mm_ddr.cycles", "arm_cmn_0/hnf_cache_miss/"} {
		if _, _, ok, err := Recorded(notOurs, ""); ok || err != nil {
			t.Errorf("%s taken as a platform counter (%v)", notOurs, err)
		}
	}
	if _, _, ok, err := Recorded("arm_cmn/hnf_mc_reqs/", "MiB"); !ok || err == nil {
		t.Errorf("CMN requests in MiB: ok %v, err %v", ok, err)
	}
}
