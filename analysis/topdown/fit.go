package topdown

import (
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// fixedKind says which Intel fixed counter an event can use, or "" for none:
// instructions (fixed 0), core cycles (fixed 1, AnyThread allowed), reference
// cycles (fixed 2) and slots (fixed 3), in their architectural encodings and the
// kernel's pseudo-encodings (event 0x00). PERF_METRICS fields (event 0x00,
// umask 0x80 and up) read an MSR and use no counter at all: "none".
func fixedKind(ev eventspec.Event) string {
	a := ev.Attr
	switch {
	case a.Type == pmu.TypeHardware:
		switch a.Config & 0xffffffff {
		case 0:
			return "cycles"
		case 1:
			return "instructions"
		case 9:
			return "ref-cycles"
		}
		return ""
	case ev.PMU != "cpu" && ev.PMU != "cpu_core" && ev.PMU != "cpu_atom":
		return "" // not a core PMU: no fixed counters
	}
	event, umask := a.Config&0xff, a.Config>>8&0xff
	switch {
	case event == 0x00 && umask >= 0x80:
		return "none"
	case event == 0x00 && umask == 0x04:
		return "slots"
	case event == 0x00 && umask == 0x03:
		return "ref-cycles"
	case event == 0x3c && umask == 0x00:
		return "cycles"
	case event == 0xc0 && umask == 0x00:
		return "instructions"
	}
	return ""
}

// GeneralPurposeNeeded returns, per group of d, how many general-purpose
// counters it needs on an Intel core PMU: each fixed-counter kind is served once
// by its fixed counter, PERF_METRICS fields need none, everything else a
// general-purpose counter. On other vendors every event needs one.
func GeneralPurposeNeeded(d *metric.Definition, pmus []*pmu.PMU, corePMU string, intel bool) ([]int, error) {
	spec := map[string]string{}
	for _, e := range d.Events {
		spec[e.Name] = e.Spec
	}
	out := make([]int, len(d.Groups))
	for i, g := range d.Groups {
		used := map[string]bool{}
		for _, name := range g {
			ev, err := resolveOn(spec[name], pmus, corePMU)
			if err != nil {
				return nil, fmt.Errorf("%s: event %s: %w", d.Name, name, err)
			}
			kind := ""
			if intel {
				kind = fixedKind(ev)
			}
			switch {
			case kind == "none":
			case kind != "" && !used[kind]:
				used[kind] = true
			default:
				out[i]++
			}
		}
	}
	return out, nil
}

// CheckFit reports the groups of d that need more general-purpose counters than
// gp, which the engine would then have to split (and so multiplex) at open.
// corePMU is the core PMU the tree counts on, as in LiveGroups.
func CheckFit(d *metric.Definition, pmus []*pmu.PMU, corePMU string, intel bool, gp int) error {
	need, err := GeneralPurposeNeeded(d, pmus, corePMU, intel)
	if err != nil {
		return err
	}
	for i, n := range need {
		if n > gp {
			return fmt.Errorf("%s: group %d (%v) needs %d general-purpose counters; this CPU has %d", d.Name, i, d.Groups[i], n, gp)
		}
	}
	return nil
}

// GeneralPurposePerThread is how many general-purpose counters an Intel
// P-core gives a thread with SMT on: 4 before Golden Cove (CPUID.0AH with
// HT), 8 from it on (Sapphire Rapids, Emerald and Granite Rapids, Alder
// Lake's P-cores); 0 for a tree it does not know.
func GeneralPurposePerThread(uarch string) int {
	switch uarch {
	case "skl", "skx", "clx", "icl", "icx":
		return 4
	case "spr", "emr", "gnr", "adl":
		return 8
	}
	return 0
}
