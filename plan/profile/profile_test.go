package profile

import (
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/plan/config"
)

func TestDefaultProfileWithoutPMU(t *testing.T) {
	specs, err := Build(Default(false), fixture.PMUs(t, fixture.NoPMU()))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "software" || len(specs[0].Events) != 7 {
		t.Fatalf("specs = %+v", specs)
	}
	for _, ev := range specs[0].Events {
		if ev.PMU != "software" || ev.Attr.Type != 1 {
			t.Errorf("software group holds %+v", ev)
		}
	}
}

func TestDefaultProfileHybridSplitsPerCorePMU(t *testing.T) {
	specs, err := Build(Default(true), fixture.PMUs(t, fixture.IntelAlderLake()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	want := "software cgroup-switches core/cpu_atom core/cpu_core branches/cpu_atom branches/cpu_core cache/cpu_atom cache/cpu_core ref-cycles/cpu_atom ref-cycles/cpu_core"
	if strings.Join(names, " ") != want {
		t.Fatalf("groups = %v\nwant %s", names, want)
	}
	atom := specs[2]
	if c := atom.CPUs(); len(c) != 4 || c[0] != 4 {
		t.Errorf("core/cpu_atom on CPUs %v, want 4-7", c)
	}
	for _, ev := range atom.Events {
		if ev.PMU != "cpu_atom" || ev.Attr.Config>>32 != 10 {
			t.Errorf("core/cpu_atom holds %+v", ev)
		}
	}
}

func TestHybridGroupMixingSoftwareIsSplitToo(t *testing.T) {
	g := cfgGroup(t, "mixed", "cycles", "cpu-clock")
	specs, err := Build([]config.Group{g}, fixture.PMUs(t, fixture.IntelAlderLake()))
	if err != nil || len(specs) != 2 || specs[0].Events[1].PMU != "software" {
		t.Fatalf("specs = %+v, %v", specs, err)
	}
}

func cfgGroup(t *testing.T, name string, specs ...string) config.Group {
	t.Helper()
	var b strings.Builder
	b.WriteString("groups:\n  - name: " + name + "\n    events:\n")
	for _, s := range specs {
		b.WriteString("      - " + s + "\n")
	}
	cfg, err := config.Parse("c.yml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Groups[0]
}

func TestBuildErrors(t *testing.T) {
	adl := fixture.PMUs(t, fixture.IntelAlderLake())
	cases := []struct {
		groups []config.Group
		want   string
	}{
		{[]config.Group{cfgGroup(t, "x", "cycles", "cpu_core/event=0x3c/")}, `c.yml:5:9: group "x" mixes cpu_core events with cpu_atom`},
		{[]config.Group{cfgGroup(t, "x", "cpu_core/event=0x3c/", "cpu_atom/event=0x3c/")}, `group "x" has no CPU`},
		{[]config.Group{cfgGroup(t, "x", "nosuch/event=1/")}, `c.yml:4:9: event "nosuch/event=1/": no PMU named "nosuch"`},
		{[]config.Group{cfgGroup(t, "a", "cpu-clock"), cfgGroup(t, "b", "cpu-clock")}, `event "cpu-clock" on PMU software is already counted in group "a" (c.yml:4:9)`},
	}
	for _, c := range cases {
		specs, err := Build(c.groups, adl)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
		if strings.Contains(c.want, "already counted") && len(specs) != 1 {
			t.Errorf("the first group should be kept: %+v", specs)
		}
	}
}

// The Info groups resolve to perf's generic cache events, config = cache |
// op<<8 | result<<16 (perf_event_open(2), PERF_TYPE_HW_CACHE): L1D 0,
// LL 2; read 0, write 1; access 0, miss 1.
func TestInfoGroupsAreGenericCacheEvents(t *testing.T) {
	specs, err := Build(Info(), fixture.PMUs(t, fixture.IntelSapphireRapids()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"L1-dcache-loads": 0, "L1-dcache-load-misses": 1 << 16, "L1-dcache-stores": 1 << 8, "LLC-loads": 2, "LLC-load-misses": 2 | 1<<16}
	n := 0
	for _, s := range specs {
		for _, ev := range s.Events {
			c, ok := want[ev.Name]
			if !ok || ev.Attr.Type != 3 || ev.Attr.Config != c {
				t.Errorf("%s: %s type %d config %#x, want type 3 config %#x", s.Name, ev.Name, ev.Attr.Type, ev.Attr.Config, c)
			}
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d events, want %d", n, len(want))
	}
}
