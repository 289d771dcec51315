package spe

import (
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// midrModel is the part of a MIDR_EL1 that names a core (implementer,
// architecture, part number), as the kernel's MIDR_CPU_MODEL_MASK; the
// variant and revision vary within a model.
const midrModel = 0xff0ffff0

// armModel is MIDR_CPU_MODEL(ARM_CPU_IMP_ARM, part).
func armModel(part uint32) uint64 { return uint64(0x41<<24 | 0xf<<16 | part<<4) }

// commonSources are the cores whose Data Source packets use the encoding
// of the Source* constants (perf's common_ds_encoding_cpus, Linux 6.14):
// Neoverse N1, V1, N2, V2 and Cortex-X1C, X3, A720, X925, A725, A720AE.
var commonSources = []uint64{
	armModel(0xd0c), armModel(0xd40), armModel(0xd49), armModel(0xd4f),
	armModel(0xd4c), armModel(0xd4e), armModel(0xd81), armModel(0xd85), armModel(0xd87), armModel(0xd89),
}

// CommonSources says whether the core midr names writes data sources in
// the common encoding.
func CommonSources(midr uint64) bool {
	for _, m := range commonSources {
		if midr&midrModel == m {
			return true
		}
	}
	return false
}

// ampereOne is MIDR_CPU_MODEL(ARM_CPU_IMP_AMPERE, AMPERE_CPU_PART_AMPERE1A),
// whose data sources perf maps to the common ones.
const ampereOne = 0xc0<<24 | 0xf<<16 | 0xac4<<4

// ampereOneSources are AmpereOne's data sources as the common ones: a
// local chip cache or device as a peer core, its system-level cache,
// another chip's cache, DDR, L1D and L2D.
var ampereOneSources = map[uint16]uint16{0x0: SourcePeerCore, 0x3: SourceSystemCache, 0x5: SourceRemote, 0x7: SourceDRAM,
	0x8: SourceL1D, 0x9: SourceL2}

// DataSrc is the perf_mem_data_src that perf's arm-spe decoder gives a
// record taken on the core midr names (as of Linux 6.18 and the stable
// perf releases with its fixes, which mark a remote access mem_remote):
// 0 for an operation that is neither a load nor a store. Where the core's
// data sources are in the common encoding (or AmpereOne's, mapped to it),
// a load's source is its level (a store's is not recorded); elsewhere the
// level is what the events say (last-level cache, else L1D, hit or miss;
// HiSilicon's encoding is not read). TLB events give the TLB field either
// way.
func DataSrc(r *Record, midr uint64) uint64 {
	d := datasrc.DataSrc{Op: datasrc.OpLoad}
	switch {
	case r.Load():
	case r.Store():
		d.Op = datasrc.OpStore
	default:
		return 0
	}
	switch {
	case CommonSources(midr):
		commonSource(r, &d)
	case midr&midrModel == ampereOne:
		if src, ok := ampereOneSources[r.Source]; ok { // other values: no level, as in perf
			common := *r
			common.Source = src
			commonSource(&common, &d)
		}
	default:
		eventSource(r, &d)
	}
	if r.Events&(EvTLBAccess|EvTLBWalk) != 0 {
		d.DTLB = datasrc.TLBWK | datasrc.TLBHit
		if r.Events&EvTLBWalk != 0 {
			d.DTLB = datasrc.TLBWK | datasrc.TLBMiss
		}
	}
	return d.Encode()
}

// commonSource reads the Data Source packet (three cache levels, a system
// cache taken as L3).
func commonSource(r *Record, d *datasrc.DataSrc) {
	if r.Store() {
		d.Lvl, d.LvlNum, d.Snoop = datasrc.LvlNA, datasrc.LvlNumNA, datasrc.SnoopNA
		return
	}
	hit := func(lvl uint16, num uint8) { d.Lvl, d.LvlNum = lvl|datasrc.LvlHit, num }
	switch r.Source {
	case SourceL1D:
		hit(datasrc.LvlL1, datasrc.LvlNumL1)
		d.Snoop = datasrc.SnoopNone
	case SourceL2:
		hit(datasrc.LvlL2, datasrc.LvlNumL2)
		d.Snoop = datasrc.SnoopNone
	case SourcePeerCore: // another core's L1 or L2
		hit(datasrc.LvlL2, datasrc.LvlNumL2)
		d.SnoopX = datasrc.SnoopXPeer
	case SourceLocalCluster, SourcePeerCluster: // a cache-to-cache transfer
		hit(datasrc.LvlL3, datasrc.LvlNumL3)
		d.SnoopX = datasrc.SnoopXPeer
	case SourceSystemCache:
		hit(datasrc.LvlL3, datasrc.LvlNumL3)
		d.Snoop = datasrc.SnoopHit
	case SourceRemote: // the other socket, at a level not known
		d.Lvl, d.LvlNum, d.Remote, d.SnoopX = datasrc.LvlNA, datasrc.LvlNumNA, true, datasrc.SnoopXPeer
	case SourceDRAM:
		hit(datasrc.LvlLocRAM, datasrc.LvlNumRAM)
		d.Snoop = datasrc.SnoopNone
	}
}

// eventSource reads the level from the cache events.
func eventSource(r *Record, d *datasrc.DataSrc) {
	hitOrMiss := func(miss bool) uint16 {
		if miss {
			return datasrc.LvlMiss
		}
		return datasrc.LvlHit
	}
	switch {
	case r.Events&(EvLLCAccess|EvLLCMiss) != 0:
		d.Lvl = datasrc.LvlL3 | hitOrMiss(r.Events&EvLLCMiss != 0)
	case r.Events&(EvL1DAccess|EvL1DRefill) != 0:
		d.Lvl = datasrc.LvlL1 | hitOrMiss(r.Events&EvL1DRefill != 0)
	}
	d.Remote = r.Events&EvRemoteAccess != 0
}

// SampleType is what Sample fills in: perf's synthesized "memory" event.
const SampleType = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_ADDR |
	unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_WEIGHT | unix.PERF_SAMPLE_DATA_SRC |
	unix.PERF_SAMPLE_PHYS_ADDR

// Sample sets s to the sample perf synthesizes from a load or store record
// for its "memory" event (perf script --itrace=M): the PC, the data's
// virtual and physical addresses, the data source for midr's core, the
// total latency as the weight, a period of 1, the timestamp through tc,
// and the TID from a context packet. PID and CPU are the caller's (the
// AUX buffer's owner, the switch records). It returns false, leaving s
// alone, for any other operation.
func (r *Record) Sample(s *perfrecord.Sample, midr uint64, tc perfdata.TimeConv) bool {
	src := DataSrc(r, midr)
	if src == 0 {
		return false
	}
	s.Has = SampleType
	s.IP, s.Addr, s.PhysAddr, s.DataSrc = r.PC, r.Virtual, r.Physical, src
	s.Weight, s.Period = uint64(r.Total), 1
	s.Misc = unix.PERF_RECORD_MISC_USER
	if r.EL != 0 {
		s.Misc = unix.PERF_RECORD_MISC_KERNEL
	}
	if r.Has&HasTimestamp != 0 {
		s.Time = tc.Time(r.Timestamp)
	}
	if r.Has&HasContext != 0 {
		s.TID = r.Context
	}
	return true
}
