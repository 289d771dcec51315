// Package platformpmu knows which platform PMUs of a host count memory
// traffic the way the exporter reads it: an AMD Zen 4 or Zen 5 data fabric
// (DRAM traffic by requester), an Arm CMN mesh (requests to the memory
// controllers) and an NXP i.MX 8M DDR controller (bytes). They are facts
// about the PMUs sysfs shows, which the capability verdicts
// (host/capability) and the counters' plan (plan/platform) both read.
package platformpmu

import (
	"slices"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// The CPU families (as /proc/cpuinfo gives them) whose data fabric events
// the exporter encodes: Zen 4's (0x19; Zen 3 shares it, but not the
// PerfMonV2 data fabric, as its amd_df format says) and Zen 5's (0x1a).
const (
	Zen4Family = "25"
	Zen5Family = "26"
)

// PerfMonV2DF says whether an amd_df event format is the PerfMonV2 data
// fabric's (amd/uncore.c's event14v2, config:0-7,32-37): Zen 4's and Zen
// 5's, not Zen 3's (config:0-7,32-35,59-60).
func PerfMonV2DF(f pmu.Format) bool {
	return f.Word == 0 && slices.Equal(f.Ranges, []pmu.BitRange{{Lo: 0, Hi: 7}, {Lo: 32, Hi: 37}})
}

// CountsDRAM says whether p is a data fabric whose DRAM traffic by
// requester the exporter counts: a PerfMonV2 amd_df, on a CPU of family
// 25 (Zen 4) or 26 (Zen 5).
func CountsDRAM(p *pmu.PMU, family string) bool {
	return p.Name == "amd_df" && (family == Zen4Family || family == Zen5Family) && PerfMonV2DF(p.Formats["event"])
}

// cmnParts are the Arm CMN meshes whose home nodes are HN-Fs with the
// memory controller events CMNEvents names, by the PMU's identifier
// (arm-cmn.c prints the part number and revision, "%03x%02x"): CMN-600,
// CMN-650, CMN-700 and CI-700, as perf's arm/cmn event list matches them
// ("Compat": "(434|436|43c|43a).*").
var cmnParts = []string{"434", "436", "43c", "43a"}

// CMNEvent is one of an Arm CMN's memory controller request counts: its
// name in the exporter's series and its sysfs alias.
type CMNEvent struct{ Name, Alias string }

// CMNEvents are an Arm CMN's memory controller requests, by the sysfs
// alias arm-cmn.c gives them (type 0x5, the HN-F: eventid 0xd and 0xc):
// the terms of perf's mc_message_retry_rate (hnf_mc_retries /
// hnf_mc_reqs). Without a nodeid the driver counts every HN-F of the mesh
// and sums them.
func CMNEvents() []CMNEvent {
	return []CMNEvent{{"sent", "hnf_mc_reqs"}, {"retried", "hnf_mc_retries"}}
}

// CountsMemoryRequests says whether p is an Arm CMN mesh whose memory
// controller requests the exporter counts: a part cmnParts names,
// exposing both of CMNEvents' aliases.
func CountsMemoryRequests(p *pmu.PMU) bool {
	if !strings.HasPrefix(p.Name, "arm_cmn") || len(p.Identifier) < 3 || !slices.Contains(cmnParts, p.Identifier[:3]) {
		return false
	}
	for _, e := range CMNEvents() {
		if _, ok := p.Aliases[e.Alias]; !ok {
			return false
		}
	}
	return true
}

// DDR is an NXP i.MX 8M DDR controller's read and write counts (sysfs
// event terms) and the bytes one count moves.
type DDR struct {
	Read, Write string
	Bytes       float64
}

// ddrParts are the i.MX 8M DDR controllers by the imx8_ddr PMU's
// identifier (fsl_imx8_ddr_perf.c): perf's freescale/imx8m*/sys/metrics.json
// imx8m*_ddr_read.all and _write.all. The 8M Mini and Quad move 16 bytes a
// read or write cycle (read_cycles * 4 * 4), the 8M Nano 8 (* 4 * 2); the
// 8M Plus's enhanced AXI filter counts bytes, for every master
// (axi_mask=0xffff).
var ddrParts = map[string]DDR{
	"i.MX8MM": {"read-cycles", "write-cycles", 16},
	"i.MX8MQ": {"read-cycles", "write-cycles", 16},
	"i.MX8MN": {"read-cycles", "write-cycles", 8},
	"i.MX8MP": {"axid-read,axi_mask=0xffff,axi_id=0x0000", "axid-write,axi_mask=0xffff,axi_id=0x0000", 1},
}

// DDRPart is the i.MX 8M DDR controller an imx8_ddr PMU's identifier
// names ("i.MX8MM"), if the exporter knows it.
func DDRPart(identifier string) (DDR, bool) {
	d, ok := ddrParts[identifier]
	return d, ok
}

// CountsDDR says whether p is an NXP i.MX 8M DDR controller whose bytes
// the exporter counts: an imx8_ddr PMU whose identifier DDRPart knows.
func CountsDDR(p *pmu.PMU) bool {
	_, ok := DDRPart(p.Identifier)
	return ok && strings.HasPrefix(p.Name, "imx8_ddr")
}
