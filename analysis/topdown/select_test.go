package topdown

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// TestSelectAgreesWithMapfiles walks Intel's perfmon mapfile and Linux perf's x86
// and arm64 mapfiles and checks that every CPU they assign to a platform we have a
// tree for selects that tree.
func TestSelectAgreesWithMapfiles(t *testing.T) {
	dir := reference.Dir(t)
	intelDirs := map[string]string{"SKL": "skl", "SKX": "skx", "CLX": "clx", "ICL": "icl", "ICX": "icx", "SPR": "spr", "EMR": "emr", "GNR": "gnr", "ADL": "adl", "SRF": "srf"}
	n := 0
	lines(t, filepath.Join(dir, "intel-perfmon/mapfile.csv"), func(f []string) {
		if len(f) < 4 || f[3] != "core" && f[3] != "hybridcore" {
			return
		}
		plat := strings.Split(strings.TrimPrefix(f[2], "/"), "/")[0]
		want, ok := intelDirs[plat]
		if !ok || strings.Contains(f[2], "gracemont") && !strings.Contains(f[0], "6-BE") {
			return // hybrid E-core lines share the P-core's family-model
		}
		if strings.Contains(f[0], "6-BE") { // Alder Lake-N: Gracemont cores alone
			want = "grt"
		}
		// GenuineIntel-6-55-[01234]: model, and optionally a stepping class.
		parts := strings.Split(f[0], "-")
		model, _ := strconv.ParseUint(parts[2], 16, 64)
		steppings := []string{"0"}
		if len(parts) > 3 {
			steppings = nil
			for _, c := range strings.Trim(parts[3], "[]") {
				s, _ := strconv.ParseUint(string(c), 16, 64)
				steppings = append(steppings, strconv.FormatUint(s, 10))
			}
		}
		for _, step := range steppings {
			got, err := Select(CPU{Vendor: "GenuineIntel", Family: "6", Model: strconv.FormatUint(model, 10), Stepping: step})
			if got != want {
				t.Errorf("%s stepping %s: %q %v, want %s", f[0], step, got, err, want)
			}
			n++
		}
	})
	// AMD: family 25 splits Zen 3 and Zen 4 by model pattern.
	zen3 := regexp.MustCompile(`^([245][0-9A-F]|[0-9A-F])$`)
	for model := 0; model < 256; model++ {
		got, err := Select(CPU{Vendor: "AuthenticAMD", Family: "25", Model: strconv.Itoa(model)})
		isZen3 := zen3.MatchString(strings.ToUpper(strconv.FormatInt(int64(model), 16)))
		if isZen3 != (err != nil) || (!isZen3 && got != "zen4") {
			t.Errorf("AMD 25 model %#x: %q %v (zen3 by mapfile: %v)", model, got, err, isZen3)
		}
		n++
	}
	lines(t, filepath.Join(dir, "linux-pmu-events/arm64/mapfile.csv"), func(f []string) {
		want := map[string]string{"arm/neoverse-v1": "neoverse-v1", "arm/neoverse-n2-v2": "neoverse-n2"}[f[2]]
		if want == "" || len(f[0]) < 18 {
			return
		}
		midr, _ := strconv.ParseUint(f[0][2:], 16, 64)
		part := midr >> 4 & 0xfff
		got, err := Select(CPU{Vendor: "0x41", Model: "0x" + strconv.FormatUint(part, 16)})
		file := got
		if f, ok := sameTree[got]; ok {
			file = f
		}
		if file != want {
			t.Errorf("MIDR %s: %q %v uses tree %q, want %s", f[0], got, err, file, want)
		}
		n++
	})
	if n < 280 {
		t.Errorf("only %d CPUs checked", n)
	}
}

func TestSelectExplainsMisses(t *testing.T) {
	for _, c := range []struct {
		cpu  CPU
		want string
	}{
		{CPU{Vendor: "GenuineIntel", Family: "6", Model: "170"}, "no built-in Top-Down tree for Intel family 6 model 0xaa"}, // Meteor Lake
		{CPU{Vendor: "AuthenticAMD", Family: "25", Model: "1"}, "Zen 3"},
		{CPU{Vendor: "0x41", Model: "0xd0c"}, "reports no slots"},
		{CPU{Vendor: "HygonGenuine", Family: "24"}, "no built-in Top-Down tree for vendor"},
	} {
		if _, err := Select(c.cpu); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cpu, err, c.want)
		}
	}
	if u, err := Select(CPU{Vendor: "0x41", Model: "0xd0c", ArmSlots: true}); u != "neoverse" || err != nil {
		t.Errorf("Arm with slots: %q %v", u, err)
	}
	if u, _ := Select(CPU{Vendor: "AuthenticAMD", Family: "26", Model: "17"}); u != "zen5" {
		t.Errorf("family 1Ah: %q", u)
	}
}

func lines(t *testing.T, path string, fn func([]string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "#") || strings.HasPrefix(s.Text(), "Family") {
			continue
		}
		fn(strings.Split(s.Text(), ","))
	}
}

func TestForHostAndCoreSlots(t *testing.T) {
	pmus := fixture.PMUs(t, fixture.ArmNeoverseN1()) // caps/slots 0x00000004
	if s := CoreSlots(pmus); s != 4 {
		t.Errorf("CoreSlots = %v, want 4", s)
	}
	// An N1 part is not in the table, but its PMU has slots: the SBSA tree.
	if u, err := ForHost(host.CPU{Vendor: "0x41", Model: "0xd0c"}, pmus); !slices.Equal(u, []Target{{Uarch: "neoverse"}}) || err != nil {
		t.Errorf("ForHost(Arm with slots) = %v, %v", u, err)
	}
	if s := CoreSlots(fixture.PMUs(t, fixture.IntelSkylake())); s != 0 {
		t.Errorf("Skylake CoreSlots = %v", s)
	}
	if u, _ := ForHost(host.CPU{Vendor: "GenuineIntel", Family: "6", Model: "85", Stepping: "7"}, nil); !slices.Equal(u, []Target{{Uarch: "clx"}}) {
		t.Errorf("ForHost(6/0x55/7) = %v, want clx", u)
	}
}

// An Alder Lake hybrid gets the P-core tree on cpu_core and the Gracemont tree
// on cpu_atom; with its E-cores disabled (one PMU named cpu), the P-core tree only.
func TestForHostHybrid(t *testing.T) {
	adl := host.CPU{Vendor: "GenuineIntel", Family: "6", Model: "151", Stepping: "2"}
	got, err := ForHost(adl, fixture.PMUs(t, fixture.IntelAlderLake()))
	want := []Target{{Uarch: "adl", PMU: "cpu_core"}, {Uarch: "grt", PMU: "cpu_atom"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ForHost(ADL hybrid) = %v, %v; want %v", got, err, want)
	}
	got, _ = ForHost(adl, fixture.PMUs(t, fixture.IntelSapphireRapids()))
	if !slices.Equal(got, []Target{{Uarch: "adl"}}) {
		t.Errorf("ForHost(ADL, one core PMU) = %v", got)
	}
	// Alder Lake-N (model 0xBE) has only Gracemont cores, on one PMU: the
	// Gracemont tree there, not on cpu_atom.
	adln := host.CPU{Vendor: "GenuineIntel", Family: "6", Model: "190", Stepping: "0"}
	if got, err := ForHost(adln, fixture.PMUs(t, fixture.IntelSapphireRapids())); err != nil || !slices.Equal(got, []Target{{Uarch: "grt"}}) {
		t.Errorf("ForHost(ADL-N) = %v, %v; want the grt tree on the only core PMU", got, err)
	}
	// And its events resolve there: every one on that PMU, cpu, with its type.
	d, err := Builtin("grt")
	if err != nil {
		t.Fatal(err)
	}
	pmus := fixture.PMUs(t, fixture.IntelSapphireRapids())
	var cpuType uint32
	for _, p := range pmus {
		if p.Name == "cpu" {
			cpuType = p.Type
		}
	}
	groups, err := LiveGroups(d, pmus, "")
	if err != nil || len(groups) == 0 {
		t.Fatalf("grt on one core PMU: %d groups, %v", len(groups), err)
	}
	for _, g := range groups {
		for _, ev := range g.Events {
			if ev.PMU != "cpu" || ev.Attr.Type != cpuType {
				t.Errorf("%s: %s on PMU %q type %d, want cpu's", g.Name, ev.Name, ev.PMU, ev.Attr.Type)
			}
		}
	}
	// --collector.topdown.uarch on a hybrid host: each tree on its own core type.
	if got := Place([]string{"grt", "spr"}, fixture.PMUs(t, fixture.IntelAlderLake())); !slices.Equal(got,
		[]Target{{Uarch: "grt", PMU: "cpu_atom"}, {Uarch: "spr", PMU: "cpu_core"}}) {
		t.Errorf("Place = %v", got)
	}
}
