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
// for every platform counter of the Intel and AMD fixtures, named as perf
// names it merged (uncore_imc/…/) and not (uncore_imc_0/…/).
func TestRecordedUndoesPerfScaling(t *testing.T) {
	for _, host := range []string{"intel", "amd"} {
		tree := fixture.IntelPlatform()
		if host == "amd" {
			tree = fixture.AMDPlatform()
		}
		pmus := fixture.PMUs(t, tree)
		cs, err := Select(pmus, []int{0, 1, 2, 3}, "25")
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
