package cacheline

import (
	"math/bits"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
)

// Report is the table as /debug/cachelines and `pmu_exporter c2c` show it.
type Report struct {
	Totals ReportTotals `json:"totals"`
	Lines  []LineReport `json:"lines"`
}

// SampleCounts are the samples of a line or of the whole table: loads and
// stores, the loads another core's cache served (perf c2c's HITM and peer
// columns), and where each was served.
type SampleCounts struct {
	Loads      uint64 `json:"load_samples"`
	Stores     uint64 `json:"store_samples"`
	LocalHITM  uint64 `json:"local_hitm_samples"`
	RemoteHITM uint64 `json:"remote_hitm_samples"`
	LocalPeer  uint64 `json:"local_peer_samples"`
	RemotePeer uint64 `json:"remote_peer_samples"`
	Served     Served `json:"served"`
}

// ReportTotals are the table's totals.
type ReportTotals struct {
	SampleCounts
	NoAddr       uint64 `json:"samples_without_address"`
	TrueSharing  uint64 `json:"true_sharing_events_estimated"`
	FalseSharing uint64 `json:"false_sharing_events_estimated"`
	Evicted      uint64 `json:"lines_evicted"`
}

// LineReport is one line: where it is, how hot, and who touched which bytes.
type LineReport struct {
	Address string `json:"address"`
	PID     uint32 `json:"pid"`
	Symbol  string `json:"symbol,omitempty"`
	SampleCounts
	TrueSharing  uint64         `json:"true_sharing_events_estimated"`
	FalseSharing uint64         `json:"false_sharing_events_estimated"`
	Threads      []ThreadReport `json:"threads"`
	OtherThreads uint64         `json:"samples_of_untracked_threads,omitempty"`
	Code         []CodeReport   `json:"code"`
	OtherCode    uint64         `json:"samples_of_untracked_code,omitempty"`
	Pairs        []PairReport   `json:"thread_pairs"`
	OtherPairs   uint64         `json:"sharing_events_of_untracked_pairs,omitempty"`
}

// Served are samples by where they were served, as perf c2c's Shared Data
// Cache Line Table counts them (its columns: Core Load Hit FB, L1, L2; LLC
// Load Hit LclHit, LclHitm; RMT Load Hit RmtHit, RmtHitm; Load Dram Lcl,
// Rmt; Stores L1Hit, L1Miss, N/A).
type Served struct {
	LoadFB         uint64 `json:"load_fb_hit"`
	LoadL1         uint64 `json:"load_l1_hit"`
	LoadL2         uint64 `json:"load_l2_hit"`
	LoadLLCHit     uint64 `json:"load_llc_hit"`
	LoadLLCHITM    uint64 `json:"load_llc_hitm"`
	LoadRemoteHit  uint64 `json:"load_remote_hit"`
	LoadRemoteHITM uint64 `json:"load_remote_hitm"`
	LoadLocalDRAM  uint64 `json:"load_local_dram"`
	LoadRemoteDRAM uint64 `json:"load_remote_dram"`
	StoreL1Hit     uint64 `json:"store_l1_hit"`
	StoreL1Miss    uint64 `json:"store_l1_miss"`
	StoreNA        uint64 `json:"store_na"`
}

// servedOf names counts indexed by datasrc.C2CCount.
func servedOf[T uint32 | uint64](c [datasrc.NumC2CCounts]T) Served {
	return Served{uint64(c[datasrc.C2CLoadFB]), uint64(c[datasrc.C2CLoadL1]), uint64(c[datasrc.C2CLoadL2]),
		uint64(c[datasrc.C2CLoadLLCHit]), uint64(c[datasrc.C2CLoadLLCHITM]), uint64(c[datasrc.C2CLoadRemoteHit]),
		uint64(c[datasrc.C2CLoadRemoteHITM]), uint64(c[datasrc.C2CLoadLocalDRAM]), uint64(c[datasrc.C2CLoadRemoteDRAM]),
		uint64(c[datasrc.C2CStoreL1Hit]), uint64(c[datasrc.C2CStoreL1Miss]), uint64(c[datasrc.C2CStoreNA])}
}

// PairReport is two threads whose accesses met on the line, and the
// sharing events (estimated) between them.
type PairReport struct {
	A      uint32 `json:"tid_a"`
	B      uint32 `json:"tid_b"`
	Events uint64 `json:"sharing_events_estimated"`
}

// CodeReport is one instruction's accesses to a line.
type CodeReport struct {
	IP      string `json:"ip"`
	Symbol  string `json:"symbol,omitempty"`
	Offset  int    `json:"offset"`
	Op      string `json:"op"`
	Samples uint64 `json:"samples"`
	HITM    uint64 `json:"hitm_samples"`
	Peer    uint64 `json:"peer_samples"`
	// LoadCycles is the mean latency of the instruction's loads on the
	// line by where they were served, as perf c2c's "cycles" columns; nil
	// where the sampler gives no latency (timer samples).
	LoadCycles *LoadCycles `json:"load_cycles_mean,omitempty"`
}

// LoadCycles are mean load latencies in cycles by LoadClass; a class that
// did not occur is 0 and left out of JSON.
type LoadCycles struct {
	RemoteHITM float64 `json:"remote_hitm,omitempty"`
	LocalHITM  float64 `json:"local_hitm,omitempty"`
	RemotePeer float64 `json:"remote_peer,omitempty"`
	LocalPeer  float64 `json:"local_peer,omitempty"`
	Other      float64 `json:"other,omitempty"`
}

// ThreadReport is one thread's bytes of a line, as offset ranges ("0-7,12").
type ThreadReport struct {
	TID     uint32 `json:"tid"`
	CPUs    []int  `json:"cpus"`
	Samples uint64 `json:"samples"`
	Read    string `json:"read_offsets"`
	Written string `json:"written_offsets"`
}

// Report describes the n hottest lines; symbol, when not nil, names the
// mapping an address lies in.
func (t *Table) Report(n int, symbol func(pid uint32, addr uint64) string) Report {
	return t.ReportBy(n, DisplayAny, symbol)
}

// ReportBy is Report with the lines ranked and chosen by display.
func (t *Table) ReportBy(n int, display Display, symbol func(pid uint32, addr uint64) string) Report {
	tt := t.Totals
	r := Report{Totals: ReportTotals{SampleCounts: SampleCounts{Loads: tt.Loads, Stores: tt.Stores, LocalHITM: tt.LocalHITM, RemoteHITM: tt.RemoteHITM,
		LocalPeer: tt.LocalPeer, RemotePeer: tt.RemotePeer, Served: servedOf(tt.Served)},
		NoAddr: tt.NoAddr, TrueSharing: tt.Events[TrueSharing], FalseSharing: tt.Events[FalseSharing], Evicted: tt.Evicted}}
	r.Lines = []LineReport{}
	for _, l := range t.TopBy(n, display) {
		lr := LineReport{Address: "0x" + strconv.FormatUint(l.Addr, 16), PID: l.PID, SampleCounts: SampleCounts{Loads: l.Loads, Stores: l.Stores,
			LocalHITM: l.LocalHITM, RemoteHITM: l.RemoteHITM, LocalPeer: l.LocalPeer, RemotePeer: l.RemotePeer, Served: servedOf(l.Served)}, TrueSharing: l.Events[TrueSharing],
			FalseSharing: l.Events[FalseSharing], OtherThreads: l.overflow}
		if symbol != nil {
			lr.Symbol = symbol(l.PID, l.Addr)
		}
		for _, th := range l.Threads() {
			lr.Threads = append(lr.Threads, ThreadReport{TID: th.TID, CPUs: setBits(th.CPUs), Samples: th.Samples,
				Read: Ranges(th.Read), Written: Ranges(th.Written)})
		}
		lr.Pairs, lr.OtherPairs = []PairReport{}, l.OtherPairs
		for _, pc := range l.pairs[:l.nPairs] {
			lr.Pairs = append(lr.Pairs, PairReport{A: pc.p.A, B: pc.p.B, Events: pc.n})
		}
		lr.Code, lr.OtherCode = []CodeReport{}, l.OtherCode
		for _, c := range l.Code() {
			cr := CodeReport{IP: "0x" + strconv.FormatUint(c.IP, 16), Offset: int(c.Offset), Op: "load", Samples: c.Samples, HITM: c.HITM, Peer: c.Peer}
			if c.Cycles != [NumLoadClasses]uint64{} {
				var m [NumLoadClasses]float64
				for k, n := range c.Loads {
					if n > 0 {
						m[k] = float64(c.Cycles[k]) / float64(n)
					}
				}
				cr.LoadCycles = &LoadCycles{RemoteHITM: m[RemoteHITMLoad], LocalHITM: m[LocalHITMLoad],
					RemotePeer: m[RemotePeerLoad], LocalPeer: m[LocalPeerLoad], Other: m[OtherLoad]}
			}
			if c.Store {
				cr.Op = "store"
			}
			if symbol != nil && c.IP != 0 {
				cr.Symbol = symbol(l.PID, c.IP)
			}
			lr.Code = append(lr.Code, cr)
		}
		r.Lines = append(r.Lines, lr)
	}
	return r
}

func setBits(m uint64) []int {
	out := []int{}
	for ; m != 0; m &= m - 1 {
		out = append(out, bits.TrailingZeros64(m))
	}
	return out
}

// Ranges writes a byte mask as offset ranges: 0xff0f is "0-3,8-15".
func Ranges(m uint64) string {
	var b strings.Builder
	for i := 0; i < 64; {
		if m&(1<<i) == 0 {
			i++
			continue
		}
		j := i
		for j+1 < 64 && m&(1<<(j+1)) != 0 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(j))
		}
		i = j + 1
	}
	return b.String()
}
