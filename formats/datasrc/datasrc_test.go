package datasrc

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// The constants are the kernel's (x/sys/unix generates its from the uapi
// header).
func TestConstantsAreTheKernels(t *testing.T) {
	for name, c := range map[string][2]uint64{
		"OP_LOAD": {OpLoad, unix.PERF_MEM_OP_LOAD}, "OP_STORE": {OpStore, unix.PERF_MEM_OP_STORE},
		"OP_PFETCH": {OpPfetch, unix.PERF_MEM_OP_PFETCH}, "OP_EXEC": {OpExec, unix.PERF_MEM_OP_EXEC},
		"LVL_HIT": {LvlHit, unix.PERF_MEM_LVL_HIT}, "LVL_MISS": {LvlMiss, unix.PERF_MEM_LVL_MISS},
		"LVL_LFB": {LvlLFB, unix.PERF_MEM_LVL_LFB}, "LVL_L3": {LvlL3, unix.PERF_MEM_LVL_L3},
		"LVL_LOC_RAM": {LvlLocRAM, unix.PERF_MEM_LVL_LOC_RAM}, "LVL_REM_RAM2": {LvlRemRAM2, unix.PERF_MEM_LVL_REM_RAM2},
		"LVL_REM_CCE1": {LvlRemCCE1, unix.PERF_MEM_LVL_REM_CCE1}, "LVL_UNC": {LvlUnc, unix.PERF_MEM_LVL_UNC},
		"LVLNUM_L0": {LvlNumL0, unix.PERF_MEM_LVLNUM_L0}, "LVLNUM_L2_MHB": {LvlNumL2MHB, unix.PERF_MEM_LVLNUM_L2_MHB},
		"LVLNUM_MSC": {LvlNumMSC, unix.PERF_MEM_LVLNUM_MSC}, "LVLNUM_UNC": {LvlNumUnc, unix.PERF_MEM_LVLNUM_UNC},
		"LVLNUM_CXL": {LvlNumCXL, unix.PERF_MEM_LVLNUM_CXL}, "LVLNUM_ANY_CACHE": {LvlNumAnyCache, unix.PERF_MEM_LVLNUM_ANY_CACHE},
		"LVLNUM_LFB": {LvlNumLFB, unix.PERF_MEM_LVLNUM_LFB}, "LVLNUM_RAM": {LvlNumRAM, unix.PERF_MEM_LVLNUM_RAM},
		"LVLNUM_PMEM": {LvlNumPMEM, unix.PERF_MEM_LVLNUM_PMEM}, "LVLNUM_NA": {LvlNumNA, unix.PERF_MEM_LVLNUM_NA},
		"SNOOP_HITM": {SnoopHITM, unix.PERF_MEM_SNOOP_HITM}, "SNOOPX_PEER": {SnoopXPeer, unix.PERF_MEM_SNOOPX_PEER},
		"SNOOPX_FWD": {SnoopXFwd, unix.PERF_MEM_SNOOPX_FWD}, "LOCK_LOCKED": {LockLocked, unix.PERF_MEM_LOCK_LOCKED},
		"TLB_WK": {TLBWK, unix.PERF_MEM_TLB_WK}, "TLB_OS": {TLBOS, unix.PERF_MEM_TLB_OS},
		"BLK_ADDR": {BlkAddr, unix.PERF_MEM_BLK_ADDR}, "HOPS_3": {Hops3, unix.PERF_MEM_HOPS_3},
		"OP_SHIFT": {opShift, unix.PERF_MEM_OP_SHIFT}, "LVL_SHIFT": {lvlShift, unix.PERF_MEM_LVL_SHIFT},
		"SNOOP_SHIFT": {snoopShift, unix.PERF_MEM_SNOOP_SHIFT}, "LOCK_SHIFT": {lockShift, unix.PERF_MEM_LOCK_SHIFT},
		"TLB_SHIFT": {dtlbShift, unix.PERF_MEM_TLB_SHIFT}, "LVLNUM_SHIFT": {lvlNumShift, unix.PERF_MEM_LVLNUM_SHIFT},
		"REMOTE_SHIFT": {remoteShift, unix.PERF_MEM_REMOTE_SHIFT}, "SNOOPX_SHIFT": {snoopXShift, unix.PERF_MEM_SNOOPX_SHIFT},
		"BLK_SHIFT": {blkShift, unix.PERF_MEM_BLK_SHIFT}, "HOPS_SHIFT": {hopsShift, unix.PERF_MEM_HOPS_SHIFT},
	} {
		if c[0] != c[1] {
			t.Errorf("PERF_MEM_%s: ours %#x, the kernel's %#x", name, c[0], c[1])
		}
	}
}

func TestDecodeEncode(t *testing.T) {
	const used = 1<<46 - 1 // mem_rsvd is the top 18 bits
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		v := r.Uint64() & used
		if got := Decode(v).Encode(); got != v {
			t.Fatalf("%#x decodes and encodes to %#x", v, got)
		}
	}
	// What a software event's sample carries: PERF_MEM_NA, every field
	// not available (perf script prints 1e05080021 for page faults).
	na := Decode(0x1e05080021)
	if na != (DataSrc{Op: OpNA, Lvl: LvlNA, Snoop: SnoopNA, Lock: LockNA, DTLB: TLBNA, LvlNum: LvlNumNA}) {
		t.Errorf("PERF_MEM_NA: %+v", na)
	}
	if na.Source() != SourceNA || na.OpName() != "na" || na.SnoopName() != "na" || na.HITM() != NoHITM {
		t.Errorf("PERF_MEM_NA classified %v %s %s %v", na.Source(), na.OpName(), na.SnoopName(), na.HITM())
	}
}

// Intel's PEBS load data sources (arch/x86/events/intel/ds.c,
// pebs_data_source[] for Skylake-class cores), built from the kernel's
// macros, and where each must land.
func TestIntelPEBSLoadSources(t *testing.T) {
	lh := DataSrc{Op: OpLoad, Lvl: LvlHit}
	with := func(d DataSrc, lvl uint16, num, snoop uint8, remote bool) DataSrc {
		d.Lvl |= lvl
		d.LvlNum, d.Snoop, d.Remote = num, snoop, remote
		return d
	}
	for i, c := range []struct {
		d      DataSrc
		source Source
		snoop  string
		hitm   HITM
	}{
		{DataSrc{Op: OpLoad, Lvl: LvlMiss, LvlNum: LvlNumL3, Snoop: SnoopNA}, SourceMiss, "na", NoHITM}, // 0x00 unknown L3
		{with(lh, LvlL1, LvlNumL1, SnoopNone, false), SourceL1, "none", NoHITM},
		{with(lh, LvlLFB, LvlNumLFB, SnoopNone, false), SourceLFB, "none", NoHITM},
		{with(lh, LvlL2, LvlNumL2, SnoopNone, false), SourceL2, "none", NoHITM},
		{with(lh, LvlL3, LvlNumL3, SnoopNone, false), SourceL3, "none", NoHITM},
		{with(lh, LvlL3, LvlNumL3, SnoopMiss, false), SourceL3, "miss", NoHITM},
		{with(lh, LvlL3, LvlNumL3, SnoopHit, false), SourceL3, "hit", NoHITM},
		{with(lh, LvlL3, LvlNumL3, SnoopHITM, false), SourceL3, "hitm", LocalHITM}, // 0x07
		{with(lh, LvlRemCCE1, LvlNumL3, SnoopHit, true), SourceRemoteCache, "hit", NoHITM},
		{with(lh, LvlRemCCE1, LvlNumL3, SnoopHITM, true), SourceRemoteCache, "hitm", RemoteHITM}, // 0x09
		{with(lh, LvlLocRAM, LvlNumRAM, SnoopHit, false), SourceLocalDRAM, "hit", NoHITM},
		{with(lh, LvlRemRAM1, LvlNumL3, SnoopHit, true), SourceRemoteCache, "hit", NoHITM}, // "Remote L3 hit" in today's perf
		{with(lh, LvlLocRAM, LvlNumRAM, SnoopNone|SnoopMiss, false), SourceLocalDRAM, "miss", NoHITM},
		{with(lh, LvlRemRAM1, LvlNumRAM, SnoopNone|SnoopMiss, true), SourceRemoteDRAM, "miss", NoHITM},
		{with(lh, LvlIO, LvlNumNA, SnoopNone, false), SourceIO, "none", NoHITM},
		{with(lh, LvlUnc, LvlNumNA, SnoopNone, false), SourceUncached, "none", NoHITM},
	} {
		d := Decode(c.d.Encode())
		if d.Source() != c.source || d.SnoopName() != c.snoop || d.HITM() != c.hitm || d.OpName() != "load" {
			t.Errorf("pebs_data_source[%#x] = %#x: %v/%s/%v, want %v/%s/%v", i, c.d.Encode(),
				d.Source(), d.SnoopName(), d.HITM(), c.source, c.snoop, c.hitm)
		}
	}
}

// Sources only mem_lvl_num can tell (AMD Zen 4 IBS, Arm SPE), the peer
// transfers of snoopx, and the older mem_lvl-only encodings.
func TestOtherSources(t *testing.T) {
	for name, c := range map[string]struct {
		d    DataSrc
		want Source
	}{
		"zen4 peer CCX":       {DataSrc{Op: OpLoad, Lvl: LvlHit, LvlNum: LvlNumAnyCache, Hops: Hops0}, SourcePeerCache},
		"zen4 near CCX":       {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlRemCCE1, LvlNum: LvlNumAnyCache, Remote: true, Hops: Hops0}, SourcePeerCache},
		"any cache":           {DataSrc{Op: OpLoad, Lvl: LvlHit, LvlNum: LvlNumAnyCache}, SourceAnyCache},
		"zen4 other node":     {DataSrc{Op: OpLoad, Lvl: LvlHit, LvlNum: LvlNumAnyCache, Hops: Hops1, Remote: true}, SourceRemoteCache},
		"zen4 far dram":       {DataSrc{Op: OpLoad, Lvl: LvlHit, LvlNum: LvlNumRAM, Hops: Hops2, Remote: true}, SourceRemoteDRAM},
		"cxl":                 {DataSrc{Op: OpLoad, LvlNum: LvlNumCXL}, SourceCXL},
		"pmem":                {DataSrc{Op: OpLoad, LvlNum: LvlNumPMEM}, SourcePMEM},
		"spe peer":            {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL2, LvlNum: LvlNumL2, SnoopX: SnoopXPeer}, SourcePeerCache},
		"remote peer":         {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlRemCCE1, LvlNum: LvlNumL3, SnoopX: SnoopXPeer, Remote: true}, SourceRemoteCache},
		"legacy remote dram":  {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlRemRAM2}, SourceRemoteDRAM},
		"legacy l2":           {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL2}, SourceL2},
		"store l1 miss":       {DataSrc{Op: OpStore, Lvl: LvlMiss | LvlL1}, SourceMiss},
		"store l1 hit":        {DataSrc{Op: OpStore, Lvl: LvlHit | LvlL1, LvlNum: LvlNumL1}, SourceL1},
		"lvl not available":   {DataSrc{Op: OpStore, Lvl: LvlNA}, SourceNA},
		"remote l3 (lvl bit)": {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL3, Remote: true}, SourceRemoteCache},
	} {
		if got := c.d.Source(); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
	if (DataSrc{Op: OpStore, Snoop: SnoopHITM}).HITM() != NoHITM {
		t.Error("a store counted as a HITM load")
	}
	n := DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL3, LvlNum: LvlNumL3, Snoop: SnoopHITM, SnoopX: SnoopXFwd, DTLB: TLBHit | TLBL2, Lock: LockLocked, Blk: BlkData, Hops: Hops0}.Names()
	if n.Op[0] != "load" || len(n.Lvl) != 2 || n.Lvl[1] != "l3" || n.LvlNum != "l3" || n.Snoop[0] != "hitm" ||
		n.SnoopX[0] != "fwd" || n.TLB[1] != "l2" || n.Lock[0] != "locked" || n.Blk[0] != "data" || n.Hops != 1 {
		t.Errorf("names %+v", n)
	}
}

// Loads from another core's cache as perf c2c counts them (checked against
// perf c2c report over every bit combination in cmd/pmu_exporter's
// TestC2CContentionAsPerf), and the snoop label they get.
func TestContention(t *testing.T) {
	for name, c := range map[string]struct {
		d     DataSrc
		want  Contention
		snoop string
	}{
		"intel l3 hitm":          {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL3, Snoop: SnoopHITM}, ContLocalHITM, "hitm"},
		"intel remote hitm":      {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlRemCCE1, Snoop: SnoopHITM, Remote: true}, ContRemoteHITM, "hitm"},
		"hitm without a level":   {DataSrc{Op: OpLoad, Lvl: LvlHit, Snoop: SnoopHITM}, 0, "hitm"},
		"spe peer core":          {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL2, LvlNum: LvlNumL2, SnoopX: SnoopXPeer}, ContLocalPeer, "peer"},
		"spe peer cluster":       {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL3, LvlNum: LvlNumL3, SnoopX: SnoopXPeer}, ContLocalPeer, "peer"},
		"spe remote":             {DataSrc{Op: OpLoad, Lvl: LvlNA, LvlNum: LvlNumNA, Remote: true, SnoopX: SnoopXPeer}, ContRemotePeer, "peer"},
		"remote peer with a hit": {DataSrc{Op: OpLoad, Lvl: LvlRemCCE1, Snoop: SnoopHit, SnoopX: SnoopXPeer}, 0, "peer"},
		"zen4 other ccx (hops)":  {DataSrc{Op: OpLoad, Lvl: LvlHit, Remote: true, Hops: Hops0, Snoop: SnoopHITM}, 0, "hitm"},
		"l2 hit":                 {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL2, Snoop: SnoopHit}, 0, "hit"},
		"store peer":             {DataSrc{Op: OpStore, Lvl: LvlHit | LvlL2, SnoopX: SnoopXPeer}, 0, "peer"},
	} {
		if got := c.d.Contention(); got != c.want || c.d.SnoopName() != c.snoop {
			t.Errorf("%s: %04b %s, want %04b %s", name, got, c.d.SnoopName(), c.want, c.snoop)
		}
	}
}

// Where perf c2c's table counts a load or store, by hand from
// c2c_decode_stats (and against perf c2c report over every bit combination
// in cmd/pmu_exporter's TestC2CContentionAsPerf).
func TestC2CCounts(t *testing.T) {
	bit := func(ks ...C2CCount) C2CCounts {
		var c C2CCounts
		for _, k := range ks {
			c |= 1 << k
		}
		return c
	}
	for name, c := range map[string]struct {
		d    DataSrc
		want C2CCounts
	}{
		"l3 hitm":             {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL3, Snoop: SnoopHITM}, bit(C2CLoadLLCHITM)},
		"l3 hit":              {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL3, Snoop: SnoopHit}, bit(C2CLoadLLCHit)},
		"remote cache hitm":   {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlRemCCE1, Snoop: SnoopHITM, Remote: true}, bit(C2CLoadRemoteHITM, C2CLoadRemoteDRAM)},
		"remote dram":         {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlRemRAM1, Snoop: SnoopMiss}, bit(C2CLoadRemoteDRAM)},
		"spe remote (peer)":   {DataSrc{Op: OpLoad, Lvl: LvlNA, Remote: true, SnoopX: SnoopXPeer}, bit(C2CLoadRemoteHit)},
		"zen4 hops: not mrem": {DataSrc{Op: OpLoad, Lvl: LvlHit, Remote: true, Hops: Hops1, Snoop: SnoopHit}, 0},
		"l1 and l2 both":      {DataSrc{Op: OpLoad, Lvl: LvlHit | LvlL1 | LvlL2}, bit(C2CLoadL1, C2CLoadL2)},
		"miss only":           {DataSrc{Op: OpLoad, Lvl: LvlMiss | LvlL3}, 0},
		"store l1 hit":        {DataSrc{Op: OpStore, Lvl: LvlHit | LvlL1}, bit(C2CStoreL1Hit)},
		"store l1 miss":       {DataSrc{Op: OpStore, Lvl: LvlMiss | LvlL1}, bit(C2CStoreL1Miss)},
		"store na":            {DataSrc{Op: OpStore, Lvl: LvlNA}, bit(C2CStoreNA)},
	} {
		if got := c.d.C2CCounts(); got != c.want {
			t.Errorf("%s: %012b, want %012b", name, got, c.want)
		}
	}
}
