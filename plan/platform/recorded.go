package platform

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/platformpmu"
)

// namedEvents are the platform events perf knows by its event lists'
// names rather than by a PMU's sysfs alias: Intel's memory controller and
// CHA events (intel-perfmon's *_uncore.json) and AMD's memory controller
// (perf's amdzen4 memory-controller.json).
// Each counts commands or requests of one line (casBytes), or UPI data
// flits (upiFlitBytes).
var namedEvents = map[string]struct {
	kind          Kind
	dir, locality string
}{
	"UNC_M_CAS_COUNT.RD": {MemoryBytes, "read", ""}, "UNC_M_CAS_COUNT.WR": {MemoryBytes, "write", ""},
	"umc_cas_cmd.rd": {MemoryBytes, "read", ""}, "umc_cas_cmd.wr": {MemoryBytes, "write", ""},
	"UNC_CHA_REQUESTS.READS_LOCAL": {LLCMissBytes, "read", "local"}, "UNC_CHA_REQUESTS.READS_REMOTE": {LLCMissBytes, "read", "remote"},
	"UNC_CHA_REQUESTS.WRITES_LOCAL": {LLCMissBytes, "write", "local"}, "UNC_CHA_REQUESTS.WRITES_REMOTE": {LLCMissBytes, "write", "remote"},
	"UNC_UPI_TxL_FLITS.ALL_DATA": {UPIBytes, "transmit", ""}, "UNC_UPI_RxL_FLITS.ALL_DATA": {UPIBytes, "receive", ""},
}

// encodedEvents are the memory events a recording names by their
// encoding, by PMU family (the PMU's name without its instance number):
// the CHA's and AMD's memory controllers', whose sysfs has no aliases.
func encodedEvents(family string) (Kind, []struct{ dir, locality, terms string }) {
	switch family {
	case "uncore_cha":
		return LLCMissBytes, chaEvents
	case "amd_umc":
		var out []struct{ dir, locality, terms string }
		for _, e := range umcEvents {
			out = append(out, struct{ dir, locality, terms string }{e.name, "", e.terms})
		}
		return MemoryBytes, out
	case "uncore_upi":
		var out []struct{ dir, locality, terms string }
		for _, e := range upiEvents {
			out = append(out, struct{ dir, locality, terms string }{e.dir, "", e.terms})
		}
		return UPIBytes, out
	}
	return 0, nil
}

// dfFamilies are the CPU families whose data fabric events a recording
// may name; their encodings do not overlap where they differ in meaning
// (Zen 4's and Zen 5's local and remote writes are the same events).
var dfFamilies = []string{platformpmu.Zen4Family, platformpmu.Zen5Family}

// dataFabric is the Zen 4 or Zen 5 data fabric counter a recording's
// event is, by perf's name (local_processor_read_data_beats_cs0,
// local_or_remote_socket_read_data_beats_dram_0,
// local_socket_outbound_data_beats_link0) or, with pmuName amd_df, by
// its encoding (term).
func dataFabric(event, pmuName, term string) (Counter, bool) {
	for _, family := range dfFamilies {
		for _, e := range dfEvents(family) {
			if event == e.name || pmuName == "amd_df" && sameTerms(term, e.terms) {
				return Counter{Kind: DRAMBytes, PMU: pmuName, Event: cmp.Or(term, event), Name: e.dir, Locality: e.locality, Scale: 1, Unit: "bytes"}, true
			}
		}
		for _, l := range xgmiEvents(family) {
			if event == l.name || pmuName == "amd_df" && sameTerms(term, l.terms) {
				return Counter{Kind: XGMIBytes, PMU: pmuName, Event: cmp.Or(term, event), Name: l.dir, Link: l.link, Scale: 1, Unit: "bytes"}, true
			}
		}
	}
	return Counter{}, false
}

// systemPMUEvent is the Arm CMN or NXP DDR counter a recording's event
// is: an arm_cmn PMU's hnf_mc_reqs or hnf_mc_retries (or perf's event
// list's name for it), in requests; or perf's i.MX 8M event list names
// (imx8mm_ddr.read_cycles), which say the part and so the bytes a count
// moves. A DDR controller's bare alias (imx8_ddr0/read-cycles/) does not
// say the part, and is not taken.
func systemPMUEvent(event, pmuName, term string) (c Counter, perCount float64, ok bool) {
	for _, e := range platformpmu.CMNEvents() {
		if event == e.Alias || strings.HasPrefix(pmuName, "arm_cmn") && term == e.Alias {
			return Counter{Kind: MemoryRequests, PMU: pmuName, Event: cmp.Or(term, event), Name: e.Name, Scale: 1, Unit: "requests"}, 1, true
		}
	}
	part, counter, found := strings.Cut(event, "_ddr.")
	d, _ := platformpmu.DDRPart("i.MX" + strings.ToUpper(strings.TrimPrefix(part, "imx")))
	if found && d.Read == "read-cycles" && (counter == "read_cycles" || counter == "write_cycles") {
		return Counter{Kind: MemoryBytes, Event: event, Name: strings.TrimSuffix(counter, "_cycles"), Scale: 1, Unit: "bytes"}, d.Bytes, true
	}
	return Counter{}, 0, false
}

// perCount is the bytes one count of a memory event moves.
func perCount(k Kind) float64 {
	if k == UPIBytes {
		return upiFlitBytes
	}
	return casBytes
}

// Recorded is the platform counter an event of a perf stat recording
// counted, by the name perf printed for it: power/energy-pkg/,
// msr/aperf/, cstate_core/c6-residency/, uncore_imc/cas_count_read/ (or
// uncore_imc_0/…, unmerged), uncore_cha/event=0x50,umask=0x01/,
// amd_umc/event=0x0a,rdwrmask=0x1/, or an event list's name such as
// UNC_M_CAS_COUNT.RD. toCounter turns a value perf printed in unit into
// the counter's own: joules, bytes, or counts (cycles). ok is false for an
// event that is not a platform counter; err names an event that is one
// but whose unit says it was not counted as this project reads it.
func Recorded(event, unit string) (c Counter, toCounter float64, ok bool, err error) {
	if e, found := namedEvents[event]; found {
		f, err := bytesPer(event, unit, perCount(e.kind))
		return Counter{Kind: e.kind, Event: event, Name: e.dir, Locality: e.locality, Scale: 1, Unit: "bytes"}, f, true, err
	}
	pmuName, rest, found := strings.Cut(event, "/")
	term := strings.TrimSuffix(rest, "/")
	if !found {
		pmuName = ""
	}
	if c, ok := dataFabric(event, pmuName, term); ok {
		f, err := bytesPer(event, unit, casBytes)
		return c, f, true, err
	}
	if c, perCount, ok := systemPMUEvent(event, pmuName, term); ok {
		if c.Kind == MemoryRequests && unit != "" {
			return c, 0, true, fmt.Errorf("event %s: unit %q: perf prints the CMN's requests without a unit", event, unit)
		}
		f, err := bytesPer(event, unit, perCount)
		return c, f, true, err
	}
	if !found || term == "" {
		return Counter{}, 0, false, nil
	}
	c = Counter{PMU: pmuName, Event: term, Scale: 1}
	switch family := strings.TrimRight(strings.TrimRight(pmuName, "0123456789"), "_"); family {
	case "uncore_imc":
		dir, isCAS := imcEvents[term]
		if !isCAS {
			return Counter{}, 0, false, nil
		}
		c.Kind, c.Name, c.Unit = MemoryBytes, dir, "bytes"
		f, err := bytesPer(event, unit, casBytes)
		return c, f, true, err
	case "uncore_cha", "amd_umc", "uncore_upi":
		kind, table := encodedEvents(family)
		for _, e := range table {
			if sameTerms(term, e.terms) {
				c.Kind, c.Name, c.Locality, c.Unit = kind, e.dir, e.locality, "bytes"
				if kind == UPIBytes {
					c.Link = strings.TrimPrefix(strings.TrimPrefix(pmuName, family), "_")
				}
				f, err := bytesPer(event, unit, perCount(kind))
				return c, f, true, err
			}
		}
		return Counter{}, 0, false, nil
	}
	kind, isPlatform := pmuKinds[pmuName]
	if !isPlatform {
		return Counter{}, 0, false, nil
	}
	c.Kind, c.Name = kind, name(kind, term)
	switch {
	case kind == Energy && unit == "Joules":
		c.Unit = "Joules"
		return c, 1, true, nil
	case kind == Energy:
		return c, 0, true, fmt.Errorf("event %s: unit %q: perf prints energy in Joules (the power PMU's .unit)", event, unit)
	case unit != "":
		return c, 0, true, fmt.Errorf("event %s: unit %q: perf prints the msr and cstate PMUs' counts without a unit", event, unit)
	}
	return c, 1, true, nil
}

// bytesPer is what one unit of a memory event's printed value is in
// bytes: perf prints the uncore_imc aliases scaled to MiB (their .scale
// and .unit files), an event list's ScaleUnit of 64Bytes in Bytes, and
// bare encodings as counts of perCount bytes each.
func bytesPer(event, unit string, perCount float64) (float64, error) {
	switch unit {
	case "":
		return perCount, nil
	case "MiB":
		return 1 << 20, nil
	case "Bytes", "B":
		return 1, nil
	}
	return 0, fmt.Errorf("event %s: unit %q is not one perf prints for memory traffic (MiB, Bytes, or none for counts)", event, unit)
}

// sameTerms reports whether two event encodings (event=0x50,umask=0x01)
// set the same terms to the same numbers, however perf printed them.
func sameTerms(a, b string) bool {
	ta, tb := terms(a), terms(b)
	if ta == nil || len(ta) != len(tb) {
		return false
	}
	for k, v := range ta {
		if w, ok := tb[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func terms(s string) map[string]uint64 {
	out := map[string]uint64{}
	for _, t := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			return nil
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return nil
		}
		out[k] = n
	}
	return out
}
