package topdown

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// CPU is what selection needs to know about a processor: what /proc/cpuinfo says
// (x86 family, model and stepping in decimal; Arm implementer and part in hex)
// and whether the core PMU reports slots (Arm caps/slots).
type CPU struct {
	Vendor, Family, Model, Stepping string
	ArmSlots                        bool
}

// intelFamily6 maps Intel family-6 model numbers to trees; the facts are the
// family-model lines of Intel's perfmon mapfile.
var intelFamily6 = map[uint64]string{
	0x4E: "skl", 0x5E: "skl", 0x8E: "skl", 0x9E: "skl", 0xA5: "skl", 0xA6: "skl",
	0x55: "skx", // clx from stepping 5, below
	0x7D: "icl", 0x7E: "icl", 0x6A: "icx", 0x6C: "icx",
	0x8F: "spr", 0xCF: "emr", 0xAD: "gnr", 0xAE: "gnr",
	// Alder Lake and Raptor Lake hybrids: the P-core (cpu_core) tree; ForHost
	// adds the E-core tree.
	0x97: "adl", 0x9A: "adl", 0xB7: "adl", 0xBA: "adl", 0xBF: "adl",
	// Alder Lake-N (N100, N200, i3-N305) has Gracemont E-cores only, on one
	// PMU named cpu: the Gracemont tree (the mapfile's
	// alderlake_gracemont_core line), where its cpu/ specs resolve as written.
	0xBE: "grt",
	0xAF: "srf",
}

// armParts maps Arm Ltd (implementer 0x41) part numbers to trees, from the
// MIDR lines of Linux perf's arm64 mapfile.
var armParts = map[uint64]string{0xd40: "neoverse-v1", 0xd49: "neoverse-n2", 0xd4f: "neoverse-v2"}

// Select picks the built-in tree for cpu, or says why there is none.
func Select(cpu CPU) (string, error) {
	num := func(s string, base int) (uint64, bool) {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"), base, 64)
		return v, err == nil
	}
	switch cpu.Vendor {
	case "GenuineIntel":
		fam, ok1 := num(cpu.Family, 10)
		model, ok2 := num(cpu.Model, 10)
		if !ok1 || !ok2 {
			break
		}
		if fam == 6 {
			if u, ok := intelFamily6[model]; ok {
				if step, _ := num(cpu.Stepping, 10); model == 0x55 && step >= 5 {
					return "clx", nil
				}
				return u, nil
			}
		}
		return "", fmt.Errorf("no built-in Top-Down tree for Intel family %d model %#x yet", fam, model)
	case "AuthenticAMD":
		fam, ok1 := num(cpu.Family, 10)
		model, ok2 := num(cpu.Model, 10)
		if !ok1 || !ok2 {
			break
		}
		switch {
		case fam == 0x19 && (model <= 0x0f || model>>4 == 2 || model>>4 == 4 || model>>4 == 5):
			// Linux perf's mapfile: AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]]) is Zen 3.
			return "", fmt.Errorf("AMD Zen 3 (family 19h model %#x) has no dispatch-slot events for Top-Down", model)
		case fam == 0x19:
			return "zen4", nil
		case fam == 0x1a:
			return "zen5", nil
		}
		return "", fmt.Errorf("no built-in Top-Down tree for AMD family %#x", fam)
	case "0x41":
		part, ok := num(cpu.Model, 16)
		if !ok {
			break
		}
		if u, ok := armParts[part]; ok {
			return u, nil
		}
		if cpu.ArmSlots {
			return "neoverse", nil // any Armv8.4 PMU with STALL_SLOT events: the SBSA formulas
		}
		return "", fmt.Errorf("Arm part %#x reports no slots (caps/slots): its PMU predates the STALL_SLOT events", part)
	}
	return "", fmt.Errorf("no built-in Top-Down tree for vendor %q family %q model %q", cpu.Vendor, cpu.Family, cpu.Model)
}

// CoreSlots returns the slots per cycle a core PMU reports (Arm's caps/slots,
// from PMMIR_EL1), or 0 when none does.
func CoreSlots(pmus []*pmu.PMU) float64 {
	for _, p := range pmus {
		if v, err := strconv.ParseUint(strings.TrimPrefix(p.Caps["slots"], "0x"), 16, 32); p.IsCore() && err == nil && v > 0 {
			return float64(v)
		}
	}
	return 0
}

// Target is a tree and the core PMU its events count on: "" where the host has
// a single core PMU, cpu_core or cpu_atom on an Intel hybrid.
type Target struct {
	Uarch, PMU string
}

// eCoreTrees are written from Intel's E-core TMA: on a hybrid host they count on
// cpu_atom, every other tree on cpu_core.
var eCoreTrees = map[string]bool{"grt": true, "srf": true}

// hybridECore names the E-core tree of a hybrid part, by its P-core tree.
var hybridECore = map[string]string{"adl": "grt"}

// HybridPMU names the core PMU a tree written for a hybrid part counts on there
// (adl: cpu_core, grt: cpu_atom), or "" for the trees of other parts.
func HybridPMU(uarch string) string {
	for p, e := range hybridECore {
		switch uarch {
		case p:
			return "cpu_core"
		case e:
			return "cpu_atom"
		}
	}
	return ""
}

// hybrid reports whether pmus hold Intel's two core PMUs.
func hybrid(pmus []*pmu.PMU) bool {
	var core, atom bool
	for _, p := range pmus {
		core = core || p.Name == "cpu_core"
		atom = atom || p.Name == "cpu_atom"
	}
	return core && atom
}

// Place puts each tree on its core PMU: on a hybrid host E-core trees on
// cpu_atom and the others on cpu_core; elsewhere on the only core PMU ("").
func Place(uarchs []string, pmus []*pmu.PMU) []Target {
	var out []Target
	for _, u := range uarchs {
		t := Target{Uarch: u}
		if hybrid(pmus) {
			t.PMU = "cpu_core"
			if eCoreTrees[u] {
				t.PMU = "cpu_atom"
			}
		}
		out = append(out, t)
	}
	return out
}

// ForHost picks the trees for a host's processor and PMUs: one, or on a hybrid
// part whose E-cores are enabled, the P-core tree and then the E-core tree.
func ForHost(c host.CPU, pmus []*pmu.PMU) ([]Target, error) {
	u, err := Select(CPU{Vendor: c.Vendor, Family: c.Family, Model: c.Model, Stepping: c.Stepping, ArmSlots: CoreSlots(pmus) > 0})
	if err != nil {
		return nil, err
	}
	uarchs := []string{u}
	if e, ok := hybridECore[u]; ok && hybrid(pmus) {
		uarchs = append(uarchs, e)
	}
	return Place(uarchs, pmus), nil
}
