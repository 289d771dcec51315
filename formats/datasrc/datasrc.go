// Package datasrc decodes the kernel's union perf_mem_data_src, the
// PERF_SAMPLE_DATA_SRC word that PEBS, IBS and SPE samples carry, into its
// fields, and classifies a memory access by where it was served from: the
// source and snoop labels of pmu_mem_samples_total and the HITM and peer
// counts of a c2c report. It is pure; the bit layout and values are those
// of include/uapi/linux/perf_event.h, and the classification follows perf
// c2c's (tools/perf/util/mem-events.c), reading the newer mem_lvl_num and
// mem_remote fields first where the PMU driver sets them (AMD Zen 4, Arm
// SPE, Intel since Ice Lake) and the older mem_lvl bits otherwise.
package datasrc

// DataSrc is a decoded perf_mem_data_src. Each field keeps the kernel's
// bit values (the PERF_MEM_* constants below).
type DataSrc struct {
	Op     uint8  // mem_op: OpLoad, OpStore, ...
	Lvl    uint16 // mem_lvl: LvlHit|LvlL3, ...
	Snoop  uint8  // mem_snoop
	Lock   uint8  // mem_lock
	DTLB   uint8  // mem_dtlb
	LvlNum uint8  // mem_lvl_num
	Remote bool   // mem_remote
	SnoopX uint8  // mem_snoopx
	Blk    uint8  // mem_blk
	Hops   uint8  // mem_hops
}

// The fields' places in the word (PERF_MEM_*_SHIFT) and widths.
const (
	opShift, opBits         = 0, 5
	lvlShift, lvlBits       = 5, 14
	snoopShift, snoopBits   = 19, 5
	lockShift, lockBits     = 24, 2
	dtlbShift, dtlbBits     = 26, 7
	lvlNumShift, lvlNumBits = 33, 4
	remoteShift             = 37
	snoopXShift, snoopXBits = 38, 2
	blkShift, blkBits       = 40, 3
	hopsShift, hopsBits     = 43, 3
)

// PERF_MEM_OP_*.
const (
	OpNA     = 0x01
	OpLoad   = 0x02
	OpStore  = 0x04
	OpPfetch = 0x08
	OpExec   = 0x10
)

// PERF_MEM_LVL_*.
const (
	LvlNA      = 0x01
	LvlHit     = 0x02
	LvlMiss    = 0x04
	LvlL1      = 0x08
	LvlLFB     = 0x10
	LvlL2      = 0x20
	LvlL3      = 0x40
	LvlLocRAM  = 0x80
	LvlRemRAM1 = 0x100
	LvlRemRAM2 = 0x200
	LvlRemCCE1 = 0x400
	LvlRemCCE2 = 0x800
	LvlIO      = 0x1000
	LvlUnc     = 0x2000
)

// PERF_MEM_LVLNUM_* (L2_MHB, MSC, UNC and L0 are recent additions).
const (
	LvlNumL1       = 0x01
	LvlNumL2       = 0x02
	LvlNumL3       = 0x03
	LvlNumL4       = 0x04
	LvlNumL2MHB    = 0x05
	LvlNumMSC      = 0x06
	LvlNumL0       = 0x07
	LvlNumUnc      = 0x08
	LvlNumCXL      = 0x09
	LvlNumIO       = 0x0a
	LvlNumAnyCache = 0x0b
	LvlNumLFB      = 0x0c
	LvlNumRAM      = 0x0d
	LvlNumPMEM     = 0x0e
	LvlNumNA       = 0x0f
)

// PERF_MEM_SNOOP_* and PERF_MEM_SNOOPX_*.
const (
	SnoopNA   = 0x01
	SnoopNone = 0x02
	SnoopHit  = 0x04
	SnoopMiss = 0x08
	SnoopHITM = 0x10

	SnoopXFwd  = 0x01
	SnoopXPeer = 0x02
)

// PERF_MEM_LOCK_*, PERF_MEM_TLB_*, PERF_MEM_BLK_*, PERF_MEM_HOPS_*.
const (
	LockNA     = 0x01
	LockLocked = 0x02

	TLBNA   = 0x01
	TLBHit  = 0x02
	TLBMiss = 0x04
	TLBL1   = 0x08
	TLBL2   = 0x10
	TLBWK   = 0x20
	TLBOS   = 0x40

	BlkNA   = 0x01
	BlkData = 0x02
	BlkAddr = 0x04

	Hops0 = 0x01 // remote core, same node
	Hops1 = 0x02 // remote node, same socket
	Hops2 = 0x03 // remote socket, same board
	Hops3 = 0x04 // remote board
)

func field(v uint64, shift, width uint) uint64 { return v >> shift & (1<<width - 1) }

// Decode splits the word into its fields.
func Decode(v uint64) DataSrc {
	return DataSrc{
		Op:     uint8(field(v, opShift, opBits)),
		Lvl:    uint16(field(v, lvlShift, lvlBits)),
		Snoop:  uint8(field(v, snoopShift, snoopBits)),
		Lock:   uint8(field(v, lockShift, lockBits)),
		DTLB:   uint8(field(v, dtlbShift, dtlbBits)),
		LvlNum: uint8(field(v, lvlNumShift, lvlNumBits)),
		Remote: field(v, remoteShift, 1) != 0,
		SnoopX: uint8(field(v, snoopXShift, snoopXBits)),
		Blk:    uint8(field(v, blkShift, blkBits)),
		Hops:   uint8(field(v, hopsShift, hopsBits)),
	}
}

// Encode is Decode's inverse (what PMU drivers do), for fixtures.
func (d DataSrc) Encode() uint64 {
	var r uint64
	if d.Remote {
		r = 1
	}
	return uint64(d.Op)<<opShift | uint64(d.Lvl)<<lvlShift | uint64(d.Snoop)<<snoopShift |
		uint64(d.Lock)<<lockShift | uint64(d.DTLB)<<dtlbShift | uint64(d.LvlNum)<<lvlNumShift |
		r<<remoteShift | uint64(d.SnoopX)<<snoopXShift | uint64(d.Blk)<<blkShift | uint64(d.Hops)<<hopsShift
}
