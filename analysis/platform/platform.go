// Package platform picks the node-level counters of the platform PMUs a
// host exposes in sysfs, the way perf and turbostat read them: energy
// (the power PMU, RAPL: joules by package and domain), the free-running
// MSRs (the msr PMU: tsc, aperf, mperf… per CPU, whose ratios give the
// effective frequency and busy share), and C-state residency (the
// cstate_core and cstate_pkg PMUs, counting at the TSC's rate). Each
// counter is opened on the CPUs its PMU's cpumask names (one per package
// or core), or on every online CPU where the PMU has none (msr). It reads
// nothing itself: the PMUs come from host/pmu.
package platform

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// Kind is what a platform counter counts.
type Kind uint8

const (
	// Energy counts joules (Scale turns its count into them).
	Energy Kind = iota
	// MSR is a free-running model-specific register: cycles or events.
	MSR
	// CoreCState and PackageCState count the TSC cycles a core, or a
	// package, spent in a C-state.
	CoreCState
	PackageCState
	// MemoryBytes counts the bytes a memory controller read (Name "read")
	// or wrote ("write"): its CAS commands, 64 bytes each.
	MemoryBytes
	// LLCMissBytes counts the bytes an LLC slice's misses read from (or
	// wrote to) memory, local or remote (Locality): Intel's CHA requests,
	// 64 bytes each, as its llc_miss_*_memory_bandwidth_* metrics count.
	LLCMissBytes
	// UPIBytes counts the data bytes a UPI link (Link) sent (Name
	// "transmit") or received ("receive"): its data flits, 64/9 bytes
	// each, as Intel's upi_data_transmit_bw and _receive_bw count them.
	UPIBytes
	// DRAMBytes counts the bytes a package's DRAM read (Name "read") or
	// wrote ("write") for a processor of this package or of another
	// (Locality local or remote): AMD Zen 4's data fabric, the data beats
	// of its coherent stations, 64 bytes each, as perf's
	// dram_{read,write}_data_for_{local,remote}_processor count them. The
	// memory's view of NUMA traffic, where Intel's LLCMissBytes is the
	// requester's.
	DRAMBytes
	// XGMIBytes counts the data bytes an AMD xGMI link between packages
	// (Link) sent (Name "transmit"): Zen 4's data fabric, the link's
	// outbound data beats, 64 bytes each, as perf's
	// local_socket_outbound_data_from_all_links counts them.
	XGMIBytes
)

// zen4Family is AMD Zen 4's CPU family (0x19, as /proc/cpuinfo gives it),
// whose data fabric's events dfEvents encode; Zen 3 shares it, but not
// the PerfMonV2 data fabric (its amd_df format says which).
const zen4Family = "25"

// perfMonV2DF says whether an amd_df event format is the PerfMonV2 data
// fabric's (amd/uncore.c's event14v2, config:0-7,32-37): Zen 4's and Zen
// 5's, not Zen 3's (config:0-7,32-35,59-60).
func perfMonV2DF(f pmu.Format) bool {
	return f.Word == 0 && slices.Equal(f.Ranges, []pmu.BitRange{{Lo: 0, Hi: 7}, {Lo: 32, Hi: 37}})
}

// CountsDRAM says whether p is a data fabric whose DRAM traffic by
// requester Select counts (DRAMBytes): Zen 4's PerfMonV2 amd_df, on a CPU
// of family 25 (0x19).
func CountsDRAM(p *pmu.PMU, family string) bool {
	return p.Name == "amd_df" && family == zen4Family && perfMonV2DF(p.Formats["event"])
}

// xgmiLinks is how many xGMI links perf's Zen 4 metric sums (link0 to
// link7): a part with fewer counts nothing at the others.
const xgmiLinks = 8

// xgmiEvent is one of Zen 4's xGMI links' outbound data beats: its link
// number and encoding.
type xgmiEvent struct{ link, terms string }

// xgmiEvents are Zen 4's inter-socket xGMI links' outbound data beats,
// each link's own event select (0xb5f + 0x40 per link), umask 0xf3e:
// perf's amdzen4 data-fabric.json local_socket_outbound_data_beats_link0
// to link7, the terms of its local_socket_outbound_data_from_all_links.
func xgmiEvents() []xgmiEvent {
	var out []xgmiEvent
	for l := range uint64(xgmiLinks) {
		out = append(out, xgmiEvent{strconv.FormatUint(l, 10), fmt.Sprintf("event=%#x,umask=0xf3e", 0xb5f+0x40*l)})
	}
	return out
}

// dfStations is how many coherent stations perf's Zen 4 metrics sum
// (cs0 to cs11): a part with fewer counts nothing at the others.
const dfStations = 12

// dfEvent is one of Zen 4's data fabric DRAM events: perf's name for it
// (data-fabric.json), its direction and requester, and its encoding.
type dfEvent struct{ name, dir, locality, terms string }

// dfEvents are Zen 4's coherent stations' DRAM data beats, each station's
// own event select (0x1f + 0x40 per station) with the umask of the
// requester and direction: perf's amdzen4 data-fabric.json
// {local,remote}_processor_{read,write}_data_beats_cs0 to cs11, the terms
// of its dram_*_data_for_*_processor metrics.
func dfEvents() []dfEvent {
	masks := []struct {
		dir, locality string
		umask         uint64
	}{{"read", "local", 0x7fe}, {"write", "local", 0x7ff}, {"read", "remote", 0xbfe}, {"write", "remote", 0xbff}}
	var out []dfEvent
	for _, m := range masks {
		for cs := range uint64(dfStations) {
			name := fmt.Sprintf("%s_processor_%s_data_beats_cs%d", m.locality, m.dir, cs)
			out = append(out, dfEvent{name, m.dir, m.locality, fmt.Sprintf("event=%#x,umask=%#x", 0x1f+0x40*cs, m.umask)})
		}
	}
	return out
}

// upiEvents are the data flits of Intel's UPI links (uncore_upi_*),
// UNC_UPI_TxL_FLITS.ALL_DATA and UNC_UPI_RxL_FLITS.ALL_DATA, the same
// encoding from Skylake-SP to Sapphire Rapids; their sysfs has no
// aliases.
var upiEvents = []struct{ dir, terms string }{{"transmit", "event=0x02,umask=0x0f"}, {"receive", "event=0x03,umask=0x0f"}}

// upiFlitBytes is what one data flit carries: a 64-byte line takes nine
// (Intel's formulas: flits × 64 / 9).
const upiFlitBytes = 64.0 / 9

// chaEvents are Intel's CHA requests to memory (UNC_CHA_REQUESTS.*, the
// same encoding on Skylake-SP, Icelake-SP and Sapphire Rapids), which the
// uncore_cha PMUs' sysfs does not alias.
var chaEvents = []struct{ dir, locality, terms string }{
	{"read", "local", "event=0x50,umask=0x01"}, {"read", "remote", "event=0x50,umask=0x02"},
	{"write", "local", "event=0x50,umask=0x04"}, {"write", "remote", "event=0x50,umask=0x08"},
}

// casBytes is what one CAS command moves: a 64-byte line (perf's and
// Intel's memory_bandwidth_* formulas: CAS count × 64).
const casBytes = 64

// umcEvents are the CAS counts of AMD's memory controllers (amd_umc_*),
// whose driver exposes no aliases: perf's amdzen4 memory-controller.json
// umc_cas_cmd.rd and .wr.
var umcEvents = []struct{ name, terms string }{{"read", "event=0x0a,rdwrmask=0x1"}, {"write", "event=0x0a,rdwrmask=0x2"}}

// imcEvents are the CAS count aliases of Intel's memory controllers
// (uncore_imc_*), by direction.
var imcEvents = map[string]string{"cas_count_read": "read", "cas_count_write": "write"}

// Counter is one platform event and where to open it.
type Counter struct {
	Kind  Kind
	PMU   string
	Event string // the sysfs alias: energy-pkg, aperf, c6-residency
	// Name is the exported label value: the energy domain (pkg, ram,
	// cores, psys, gpu), the MSR (tsc, aperf…), or the C-state (c6).
	Name  string
	Attr  eventspec.Attr
	Scale float64 // into Unit: joules for energy, 1 otherwise
	Unit  string
	// CPUs are where it is opened: its PMU's cpumask, else every online
	// CPU.
	CPUs []int
	// Locality is LLCMissBytes' memory: local or remote.
	Locality string
	// Link is UPIBytes' link: its PMU's instance number.
	Link string
}

// pmuKinds are the platform PMUs by sysfs name.
var pmuKinds = map[string]Kind{"power": Energy, "msr": MSR, "cstate_core": CoreCState, "cstate_pkg": PackageCState}

// Select is the counters of every platform PMU among pmus, in PMU and
// event name order, on a CPU of family (as /proc/cpuinfo gives it: which
// data fabric events to count). Events that are not counters (snapshots,
// such as the msr PMU's thermal margin) are left out.
func Select(pmus []*pmu.PMU, online []int, family string) ([]Counter, error) {
	var out []Counter
	for _, p := range pmus {
		if mem, err := memoryCounters(p, pmus, online, family); err != nil {
			return nil, err
		} else if mem != nil {
			out = append(out, mem...)
			continue
		}
		kind, ok := pmuKinds[p.Name]
		if !ok {
			continue
		}
		for _, alias := range p.AliasNames() {
			if p.Aliases[alias].Snapshot {
				continue
			}
			evs, err := eventspec.Resolve(p.Name+"/"+alias+"/", pmus)
			if err != nil {
				return nil, fmt.Errorf("platform PMU %s: %w", p.Name, err)
			}
			for _, ev := range evs {
				c := Counter{Kind: kind, PMU: p.Name, Event: alias, Name: name(kind, alias), Attr: ev.Attr, Scale: ev.Scale, Unit: ev.Unit, CPUs: ev.CPUs}
				if c.CPUs == nil {
					c.CPUs = slices.Clone(online)
				}
				out = append(out, c)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Counter) int { return strings.Compare(a.PMU+"\x00"+a.Event, b.PMU+"\x00"+b.Event) })
	return out, nil
}

// memoryCounters are the read and write CAS counts of a memory
// controller PMU (uncore_imc_N: their sysfs aliases; amd_umc_N: perf's
// encodings), an LLC slice's local and remote memory requests
// (uncore_cha_N: Intel's encodings), or a UPI link's data flits sent and
// received (uncore_upi_N), as bytes; nil for any other PMU.
func memoryCounters(p *pmu.PMU, pmus []*pmu.PMU, online []int, family string) ([]Counter, error) {
	type event struct {
		kind                      Kind
		spec, dir, locality, link string
	}
	var evs []event
	switch {
	case strings.HasPrefix(p.Name, "uncore_cha_"):
		for _, e := range chaEvents {
			evs = append(evs, event{LLCMissBytes, p.Name + "/" + e.terms + "/", e.dir, e.locality, ""})
		}
	case strings.HasPrefix(p.Name, "uncore_imc_"):
		for _, alias := range p.AliasNames() {
			if dir, ok := imcEvents[alias]; ok {
				evs = append(evs, event{MemoryBytes, p.Name + "/" + alias + "/", dir, "", ""})
			}
		}
	case strings.HasPrefix(p.Name, "amd_umc_"):
		for _, e := range umcEvents {
			evs = append(evs, event{MemoryBytes, p.Name + "/" + e.terms + "/", e.name, "", ""})
		}
	case strings.HasPrefix(p.Name, "uncore_upi_"):
		for _, e := range upiEvents {
			evs = append(evs, event{UPIBytes, p.Name + "/" + e.terms + "/", e.dir, "", strings.TrimPrefix(p.Name, "uncore_upi_")})
		}
	case CountsDRAM(p, family):
		for _, e := range dfEvents() {
			evs = append(evs, event{DRAMBytes, p.Name + "/" + e.terms + "/", e.dir, e.locality, ""})
		}
		if len(p.CPUMask) > 1 { // packages with links between them
			for _, l := range xgmiEvents() {
				evs = append(evs, event{XGMIBytes, p.Name + "/" + l.terms + "/", "transmit", "", l.link})
			}
		}
	default:
		return nil, nil
	}
	out := []Counter{}
	for _, e := range evs {
		rs, err := eventspec.Resolve(e.spec, pmus)
		if err != nil {
			return nil, fmt.Errorf("memory controller %s: %w", p.Name, err)
		}
		for _, r := range rs {
			c := Counter{Kind: e.kind, PMU: p.Name, Event: strings.Trim(strings.TrimPrefix(e.spec, p.Name), "/"), Name: e.dir,
				Attr: r.Attr, Scale: perCount(e.kind), Unit: "bytes", CPUs: r.CPUs, Locality: e.locality, Link: e.link}
			if c.CPUs == nil {
				c.CPUs = slices.Clone(online)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// name is a counter's label value: energy-pkg → pkg, c6-residency → c6.
func name(k Kind, alias string) string {
	switch k {
	case Energy:
		return strings.TrimPrefix(alias, "energy-")
	case CoreCState, PackageCState:
		return strings.TrimSuffix(alias, "-residency")
	}
	return alias
}

// Has says which of the kinds the counters cover, and for the MSRs which
// registers, for check: energy, frequency (aperf and mperf), C-states.
func Has(cs []Counter, k Kind, events ...string) bool {
	for _, want := range append(events, "") {
		found := false
		for _, c := range cs {
			if c.Kind == k && (want == "" || c.Event == want) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
