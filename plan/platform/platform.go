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
	"github.com/pmu-exporter/pmu_exporter/host/platformpmu"
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
	// (Link) sent (Name "transmit") or received ("receive", Zen 5): the
	// data fabric's link data beats, 64 bytes each, as perf's
	// local_socket_outbound_data_from_all_links (Zen 4) and
	// cross_socket_{outbound,inbound}_data_bandwidth_for_local_socket
	// (Zen 5) count them.
	XGMIBytes
	// MemoryRequests counts the requests an Arm CMN mesh's home nodes
	// (HN-F) sent to its memory controllers (Name "sent": hnf_mc_reqs)
	// and those the controllers asked to be retried ("retried":
	// hnf_mc_retries, part of the sent), summed over the mesh: perf's
	// mc_message_retry_rate is their ratio. Requests, not bytes: no
	// published formula turns them into bytes.
	MemoryRequests
)

// dfEvent is one of a data fabric's DRAM events: perf's name for it
// (data-fabric.json), its direction and requester, and its encoding.
type dfEvent struct{ name, dir, locality, terms string }

// dfEvents are the data fabric's DRAM data beats of a CPU family, each
// channel's own event select (0x1f + 0x40 per channel) with the umask of
// the requester and direction:
//   - Zen 4: perf's amdzen4 data-fabric.json
//     {local,remote}_processor_{read,write}_data_beats_cs0 to cs11, the
//     terms of its dram_*_data_for_*_processor metrics;
//   - Zen 5: amdzen5's local_or_remote_socket_read_data_beats_dram_0 to
//     11 and {local,remote}_socket_write_data_beats_dram_0 to 11, the
//     terms of its dram_read_bandwidth_for_local_or_remote_socket and
//     dram_write_bandwidth_for_{local,remote}_socket. Zen 5 does not
//     split reads by requester: their locality is local_or_remote.
func dfEvents(family string) []dfEvent {
	type mask struct {
		name, dir, locality string
		umask               uint64
	}
	var masks []mask
	switch family {
	case platformpmu.Zen4Family:
		masks = []mask{{"local_processor_read_data_beats_cs", "read", "local", 0x7fe}, {"local_processor_write_data_beats_cs", "write", "local", 0x7ff},
			{"remote_processor_read_data_beats_cs", "read", "remote", 0xbfe}, {"remote_processor_write_data_beats_cs", "write", "remote", 0xbff}}
	case platformpmu.Zen5Family:
		masks = []mask{{"local_or_remote_socket_read_data_beats_dram_", "read", "local_or_remote", 0xffe},
			{"local_socket_write_data_beats_dram_", "write", "local", 0x7ff}, {"remote_socket_write_data_beats_dram_", "write", "remote", 0xbff}}
	}
	var out []dfEvent
	for _, m := range masks {
		for ch := range uint64(dfChannels) {
			out = append(out, dfEvent{fmt.Sprintf("%s%d", m.name, ch), m.dir, m.locality, fmt.Sprintf("event=%#x,umask=%#x", 0x1f+0x40*ch, m.umask)})
		}
	}
	return out
}

// dfChannels is how many DRAM channels (Zen 4's coherent stations cs0 to
// cs11, Zen 5's dram_0 to 11) perf's metrics sum: a part with fewer
// counts nothing at the others.
const dfChannels = 12

// xgmiEvent is one of the xGMI links' data beats: its link number,
// direction, perf's name and encoding.
type xgmiEvent struct{ link, dir, name, terms string }

// xgmiEvents are a CPU family's inter-socket xGMI links' data beats,
// each link's own event select (0x40 apart):
//   - Zen 4: what links 0 to 7 send (0xb5f, umask 0xf3e): perf's
//     amdzen4 local_socket_outbound_data_beats_link0 to link7, the terms
//     of its local_socket_outbound_data_from_all_links;
//   - Zen 5: what links 0 to 5 send (0xd5f, umask 0xf3e) and receive
//     (umask 0xf3f): amdzen5's local_socket_{outbound,inbound}_data_beats_link_0
//     to 5, the terms of its
//     cross_socket_{outbound,inbound}_data_bandwidth_for_local_socket.
func xgmiEvents(family string) []xgmiEvent {
	var out []xgmiEvent
	switch family {
	case platformpmu.Zen4Family:
		for l := range uint64(8) {
			out = append(out, xgmiEvent{strconv.FormatUint(l, 10), "transmit", fmt.Sprintf("local_socket_outbound_data_beats_link%d", l),
				fmt.Sprintf("event=%#x,umask=0xf3e", 0xb5f+0x40*l)})
		}
	case platformpmu.Zen5Family:
		for _, d := range []struct {
			dir, name string
			umask     uint64
		}{{"transmit", "outbound", 0xf3e}, {"receive", "inbound", 0xf3f}} {
			for l := range uint64(6) {
				out = append(out, xgmiEvent{strconv.FormatUint(l, 10), d.dir, fmt.Sprintf("local_socket_%s_data_beats_link_%d", d.name, l),
					fmt.Sprintf("event=%#x,umask=%#x", 0xd5f+0x40*l, d.umask)})
			}
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

// memoryCounters are the memory traffic counters of an uncore or system
// PMU: a memory controller's read and write CAS counts (uncore_imc_N:
// their sysfs aliases; amd_umc_N: perf's encodings) or bytes (an i.MX 8M's
// imx8_ddrN), an LLC slice's local and remote memory requests
// (uncore_cha_N: Intel's encodings), a UPI link's data flits sent and
// received (uncore_upi_N), a Zen 4 or Zen 5 data fabric's DRAM and xGMI
// beats (amd_df), or an Arm CMN's requests to the memory controllers
// (arm_cmn_N); nil for any other PMU.
func memoryCounters(p *pmu.PMU, pmus []*pmu.PMU, online []int, family string) ([]Counter, error) {
	type event struct {
		kind                      Kind
		spec, dir, locality, link string
		scale                     float64 // what a count is, in bytes (or requests)
	}
	var evs []event
	switch {
	case strings.HasPrefix(p.Name, "uncore_cha_"):
		for _, e := range chaEvents {
			evs = append(evs, event{LLCMissBytes, p.Name + "/" + e.terms + "/", e.dir, e.locality, "", casBytes})
		}
	case strings.HasPrefix(p.Name, "uncore_imc_"):
		for _, alias := range p.AliasNames() {
			if dir, ok := imcEvents[alias]; ok {
				evs = append(evs, event{MemoryBytes, p.Name + "/" + alias + "/", dir, "", "", casBytes})
			}
		}
	case strings.HasPrefix(p.Name, "amd_umc_"):
		for _, e := range umcEvents {
			evs = append(evs, event{MemoryBytes, p.Name + "/" + e.terms + "/", e.name, "", "", casBytes})
		}
	case strings.HasPrefix(p.Name, "uncore_upi_"):
		for _, e := range upiEvents {
			evs = append(evs, event{UPIBytes, p.Name + "/" + e.terms + "/", e.dir, "", strings.TrimPrefix(p.Name, "uncore_upi_"), upiFlitBytes})
		}
	case platformpmu.CountsDRAM(p, family):
		for _, e := range dfEvents(family) {
			evs = append(evs, event{DRAMBytes, p.Name + "/" + e.terms + "/", e.dir, e.locality, "", casBytes})
		}
		if len(p.CPUMask) > 1 { // packages with links between them
			for _, l := range xgmiEvents(family) {
				evs = append(evs, event{XGMIBytes, p.Name + "/" + l.terms + "/", l.dir, "", l.link, casBytes})
			}
		}
	case platformpmu.CountsMemoryRequests(p):
		for _, e := range platformpmu.CMNEvents() {
			evs = append(evs, event{MemoryRequests, p.Name + "/" + e.Alias + "/", e.Name, "", "", 1})
		}
	case platformpmu.CountsDDR(p):
		d, _ := platformpmu.DDRPart(p.Identifier)
		evs = append(evs, event{MemoryBytes, p.Name + "/" + d.Read + "/", "read", "", "", d.Bytes},
			event{MemoryBytes, p.Name + "/" + d.Write + "/", "write", "", "", d.Bytes})
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
				Attr: r.Attr, Scale: e.scale, Unit: "bytes", CPUs: r.CPUs, Locality: e.locality, Link: e.link}
			if e.kind == MemoryRequests {
				c.Unit = "requests"
			}
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
