package datasrc

// Source is where an access was served from: the source label.
type Source uint8

// The sources, in label order.
const (
	SourceNA Source = iota
	SourceL1
	SourceLFB
	SourceL2
	SourceL3
	SourceL4
	SourceMSC
	SourceAnyCache
	SourcePeerCache
	SourceRemoteCache
	SourceLocalDRAM
	SourceRemoteDRAM
	SourcePMEM
	SourceCXL
	SourceIO
	SourceUncached
	SourceMiss
	NumSources
)

var sourceNames = [NumSources]string{"na", "l1", "lfb", "l2", "l3", "l4", "msc", "any_cache", "peer_cache",
	"remote_cache", "local_dram", "remote_dram", "pmem", "cxl", "io", "uncached", "miss"}

func (s Source) String() string {
	if s < NumSources {
		return sourceNames[s]
	}
	return "na"
}

// Remote is whether the source is beyond this node.
func (s Source) Remote() bool { return s == SourceRemoteCache || s == SourceRemoteDRAM }

// remote is perf c2c's "mrem": a remote cache level, or the remote bit.
func (d DataSrc) remote() bool { return d.Remote || d.Lvl&(LvlRemCCE1|LvlRemCCE2) != 0 }

// locality says where a cache that served the access was, mem_hops first
// where the driver sets it (AMD sets the remote bit with HOPS_0 for another
// CCX of the same node: a peer, not a remote node).
func (d DataSrc) locality() (remote, peer bool) {
	switch {
	case d.Hops >= Hops1:
		return true, false
	case d.Hops == Hops0:
		return false, true
	}
	return d.remote(), false
}

// Source classifies the access. A peer-cache transfer (snoopx peer) is a
// peer or remote cache by locality; mem_lvl_num decides where set, with
// mem_remote and mem_hops for its locality; otherwise the mem_lvl bits,
// remote levels first. An access that says only which level it missed is
// SourceMiss; one with nothing usable SourceNA.
func (d DataSrc) Source() Source {
	remote, peer := d.locality()
	if d.SnoopX&SnoopXPeer != 0 {
		if remote {
			return SourceRemoteCache
		}
		return SourcePeerCache
	}
	missOnly := d.Lvl&LvlMiss != 0 && d.Lvl&LvlHit == 0
	if n := d.LvlNum; n != 0 && n != LvlNumNA {
		if missOnly {
			return SourceMiss
		}
		cache := func(s Source) Source {
			switch {
			case remote:
				return SourceRemoteCache
			case peer:
				return SourcePeerCache
			}
			return s
		}
		switch n {
		case LvlNumL1, LvlNumL0: // L0, a cache in front of L1, is the first level too
			return cache(SourceL1)
		case LvlNumLFB:
			return cache(SourceLFB)
		case LvlNumL2, LvlNumL2MHB:
			return cache(SourceL2)
		case LvlNumL3:
			return cache(SourceL3)
		case LvlNumL4:
			return cache(SourceL4)
		case LvlNumMSC:
			return cache(SourceMSC)
		case LvlNumAnyCache:
			return cache(SourceAnyCache)
		case LvlNumRAM:
			if d.Remote || d.Hops >= Hops1 || d.Lvl&(LvlRemRAM1|LvlRemRAM2) != 0 {
				return SourceRemoteDRAM
			}
			return SourceLocalDRAM
		case LvlNumPMEM:
			return SourcePMEM
		case LvlNumCXL:
			return SourceCXL
		case LvlNumIO:
			return SourceIO
		case LvlNumUnc:
			return SourceUncached
		}
	}
	l := d.Lvl
	switch {
	case l == 0 || l&LvlNA != 0:
		return SourceNA
	case missOnly:
		return SourceMiss
	case l&(LvlRemCCE1|LvlRemCCE2) != 0:
		return SourceRemoteCache
	case l&(LvlRemRAM1|LvlRemRAM2) != 0:
		return SourceRemoteDRAM
	case l&LvlLocRAM != 0:
		if d.Remote {
			return SourceRemoteDRAM
		}
		return SourceLocalDRAM
	case l&LvlL3 != 0:
		if d.Remote {
			return SourceRemoteCache
		}
		return SourceL3
	case l&LvlL2 != 0:
		return SourceL2
	case l&LvlLFB != 0:
		return SourceLFB
	case l&LvlL1 != 0:
		return SourceL1
	case l&LvlIO != 0:
		return SourceIO
	case l&LvlUnc != 0:
		return SourceUncached
	}
	return SourceNA
}

// OpClass is the sample's op, by precedence: load, store, prefetch, exec,
// or na; an index into OpNames.
type OpClass uint8

// The op classes, and how many there are.
const (
	OpClassLoad OpClass = iota
	OpClassStore
	OpClassPrefetch
	OpClassExec
	OpClassNA
	NumOpClasses
)

// OpNames are the op labels, by OpClass.
var OpNames = [NumOpClasses]string{"load", "store", "prefetch", "exec", "na"}

// OpClass is the op: load before store (a read-modify-write is a load
// too), then prefetch and exec.
func (d DataSrc) OpClass() OpClass {
	switch {
	case d.Op&OpLoad != 0:
		return OpClassLoad
	case d.Op&OpStore != 0:
		return OpClassStore
	case d.Op&OpPfetch != 0:
		return OpClassPrefetch
	case d.Op&OpExec != 0:
		return OpClassExec
	}
	return OpClassNA
}

// OpName is the op label: load, store, prefetch, exec or na.
func (d DataSrc) OpName() string { return OpNames[d.OpClass()] }

// IsLoad and IsStore say the op.
func (d DataSrc) IsLoad() bool  { return d.Op&OpLoad != 0 }
func (d DataSrc) IsStore() bool { return d.Op&OpLoad == 0 && d.Op&OpStore != 0 }

// SnoopClass is the most telling snoop result, an index into SnoopNames.
type SnoopClass uint8

// The snoop classes, and how many there are.
const (
	SnoopClassHITM SnoopClass = iota
	SnoopClassPeer
	SnoopClassHit
	SnoopClassMiss
	SnoopClassNone
	SnoopClassNA
	NumSnoopClasses
)

// SnoopNames are the snoop labels, by SnoopClass.
var SnoopNames = [NumSnoopClasses]string{"hitm", "peer", "hit", "miss", "none", "na"}

// SnoopClass is the most telling snoop result: hitm, peer (mem_snoopx: a
// peer cache served it, Arm SPE's and AMD's transfers between cores, which
// Arm's data sources give instead of a HITM), hit, miss, none or na.
func (d DataSrc) SnoopClass() SnoopClass {
	switch {
	case d.Snoop&SnoopHITM != 0:
		return SnoopClassHITM
	case d.SnoopX&SnoopXPeer != 0:
		return SnoopClassPeer
	case d.Snoop&SnoopHit != 0:
		return SnoopClassHit
	case d.Snoop&SnoopMiss != 0:
		return SnoopClassMiss
	case d.Snoop&SnoopNone != 0:
		return SnoopClassNone
	}
	return SnoopClassNA
}

// SnoopName is the snoop label (SnoopClass).
func (d DataSrc) SnoopName() string { return SnoopNames[d.SnoopClass()] }

// HITM is a load that hit a line modified in another core's cache: the
// cost false sharing causes.
type HITM uint8

// HITM kinds.
const (
	NoHITM HITM = iota
	LocalHITM
	RemoteHITM
)

func (h HITM) String() string { return [...]string{"none", "local", "remote"}[h] }

// HITM says whether a load hit a modified line, and where, as Contention
// counts it; remote where perf c2c would count both.
func (d DataSrc) HITM() HITM {
	switch c := d.Contention(); {
	case c&ContRemoteHITM != 0:
		return RemoteHITM
	case c&ContLocalHITM != 0:
		return LocalHITM
	}
	return NoHITM
}

// Contention is what perf c2c counts of a load served from another core's
// cache, its lcl_hitm, rmt_hitm, lcl_peer and rmt_peer: a HITM is a load
// that hit a modified line (Intel, AMD); a peer snoop a load that a peer
// core's or cluster's cache served (Arm SPE, whose data sources know no
// HITM: it is what perf c2c report -d peer ranks lines by on Arm).
type Contention uint8

// Contention bits; perf counts each on its own, so a (contrived) data
// source can set more than one.
const (
	ContLocalHITM Contention = 1 << iota
	ContRemoteHITM
	ContLocalPeer
	ContRemotePeer
)

// HITM and Peer say whether any HITM or peer bit is set.
func (c Contention) HITM() bool { return c&(ContLocalHITM|ContRemoteHITM) != 0 }
func (c Contention) Peer() bool { return c&(ContLocalPeer|ContRemotePeer) != 0 }

// Contention classifies a load as perf c2c does (c2c_decode_stats in
// tools/perf/util/mem-events.c), from the mem_lvl bits only: locally, a hit
// in L3 with a HITM snoop, or in L2 or L3 with a peer snoop; remotely, a
// remote cache level or the remote bit without hops (AMD sets hops for
// another CCX of the same node, which is not remote to c2c) with a HITM
// snoop, or a peer snoop when the snoop was no hit or HITM. Stores have
// none.
func (d DataSrc) Contention() Contention {
	_, c := d.C2C()
	return c
}

// C2CCount is one of the per-line counts of loads and stores by where they
// were served that perf c2c's Shared Data Cache Line Table shows (struct
// c2c_stats).
type C2CCount uint8

// perf c2c's counts, by its column names.
const (
	C2CLoadFB         C2CCount = iota // Core Load Hit FB (ld_fbhit)
	C2CLoadL1                         // Core Load Hit L1 (ld_l1hit)
	C2CLoadL2                         // Core Load Hit L2 (ld_l2hit)
	C2CLoadLLCHit                     // LLC Load Hit LclHit (ld_llchit)
	C2CLoadLLCHITM                    // LLC Load Hit LclHitm (lcl_hitm)
	C2CLoadRemoteHit                  // RMT Load Hit RmtHit (rmt_hit)
	C2CLoadRemoteHITM                 // RMT Load Hit RmtHitm (rmt_hitm)
	C2CLoadLocalDRAM                  // Load Dram Lcl (lcl_dram)
	C2CLoadRemoteDRAM                 // Load Dram Rmt (rmt_dram)
	C2CStoreL1Hit                     // Stores L1Hit (st_l1hit)
	C2CStoreL1Miss                    // Stores L1Miss (st_l1miss)
	C2CStoreNA                        // Stores N/A (st_na)
	NumC2CCounts
)

// C2CCounts has a bit for each C2CCount a sample adds to.
type C2CCounts uint16

// C2CCounts says which of perf c2c's per-line counts an access adds to.
func (d DataSrc) C2CCounts() C2CCounts {
	c, _ := d.C2C()
	return c
}

// C2C is what perf c2c counts of an access, as c2c_decode_stats decides
// from the mem_lvl bits, the snoop and the remote bit without hops: which
// of its per-line counts the access adds to (a load can add to more than
// one, a hit in L1 and L2 both set, or to none: a miss, IO, uncached), and
// for a load, whether another core's cache served it (Contention).
func (d DataSrc) C2C() (C2CCounts, Contention) {
	var c C2CCounts
	var k Contention
	set := func(n C2CCount) { c |= 1 << n }
	l := d.Lvl
	peer := d.SnoopX&SnoopXPeer != 0
	mrem := d.Remote && d.Hops == 0
	switch {
	case d.Op&OpLoad != 0:
		if l&LvlHit != 0 {
			if l&LvlLFB != 0 {
				set(C2CLoadFB)
			}
			if l&LvlL1 != 0 {
				set(C2CLoadL1)
			}
			if l&LvlL2 != 0 {
				set(C2CLoadL2)
			}
			if l&LvlL3 != 0 {
				if d.Snoop&SnoopHITM != 0 {
					set(C2CLoadLLCHITM)
					k |= ContLocalHITM
				} else {
					set(C2CLoadLLCHit)
				}
			}
			if l&(LvlL2|LvlL3) != 0 && peer {
				k |= ContLocalPeer
			}
			if l&LvlLocRAM != 0 {
				set(C2CLoadLocalDRAM)
			}
			if l&(LvlRemRAM1|LvlRemRAM2) != 0 || mrem {
				set(C2CLoadRemoteDRAM)
			}
		}
		if l&(LvlRemCCE1|LvlRemCCE2) != 0 || mrem {
			switch {
			case d.Snoop&SnoopHit != 0:
				set(C2CLoadRemoteHit)
			case d.Snoop&SnoopHITM != 0:
				set(C2CLoadRemoteHITM)
				k |= ContRemoteHITM
			case peer:
				set(C2CLoadRemoteHit)
				k |= ContRemotePeer
			}
		}
	case d.Op&OpStore != 0:
		if l&LvlHit != 0 && l&LvlL1 != 0 {
			set(C2CStoreL1Hit)
		}
		if l&LvlMiss != 0 && l&LvlL1 != 0 {
			set(C2CStoreL1Miss)
		}
		if l&LvlNA != 0 {
			set(C2CStoreNA)
		}
	}
	return c, k
}

// Names are the decoded fields as the kernel's constant names (perf
// script's words), for people and JSON.
type Names struct {
	Op     []string `json:"op"`
	Lvl    []string `json:"lvl"`
	LvlNum string   `json:"lvl_num"`
	Remote bool     `json:"remote"`
	Snoop  []string `json:"snoop"`
	SnoopX []string `json:"snoopx"`
	Lock   []string `json:"lock"`
	TLB    []string `json:"tlb"`
	Blk    []string `json:"blk"`
	Hops   uint8    `json:"hops"`
}

// Names names every bit set.
func (d DataSrc) Names() Names {
	return Names{
		Op:     bitNames(uint64(d.Op), []string{"na", "load", "store", "pfetch", "exec"}),
		Lvl:    bitNames(uint64(d.Lvl), []string{"na", "hit", "miss", "l1", "lfb", "l2", "l3", "loc_ram", "rem_ram1", "rem_ram2", "rem_cce1", "rem_cce2", "io", "unc"}),
		LvlNum: lvlNumName(d.LvlNum),
		Remote: d.Remote,
		Snoop:  bitNames(uint64(d.Snoop), []string{"na", "none", "hit", "miss", "hitm"}),
		SnoopX: bitNames(uint64(d.SnoopX), []string{"fwd", "peer"}),
		Lock:   bitNames(uint64(d.Lock), []string{"na", "locked"}),
		TLB:    bitNames(uint64(d.DTLB), []string{"na", "hit", "miss", "l1", "l2", "walker", "os"}),
		Blk:    bitNames(uint64(d.Blk), []string{"na", "data", "addr"}),
		Hops:   d.Hops,
	}
}

func bitNames(v uint64, names []string) []string {
	out := []string{}
	for i, n := range names {
		if v&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func lvlNumName(n uint8) string {
	names := map[uint8]string{0: "", LvlNumL1: "l1", LvlNumL2: "l2", LvlNumL3: "l3", LvlNumL4: "l4",
		LvlNumL2MHB: "l2_mhb", LvlNumMSC: "msc", LvlNumL0: "l0", LvlNumUnc: "unc", LvlNumCXL: "cxl", LvlNumIO: "io",
		LvlNumAnyCache: "any_cache", LvlNumLFB: "lfb", LvlNumRAM: "ram", LvlNumPMEM: "pmem", LvlNumNA: "na"}
	if s, ok := names[n]; ok {
		return s
	}
	return "reserved"
}
