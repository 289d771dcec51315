package spe

import (
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

const (
	neoverseN1 = 0x410fd0c1 // r0p1: MIDR_ALL_VERSIONS matches any variant and revision
	cortexA72  = 0x410fd083
)

// Data sources as perf 6.1.187's arm-spe decoder (perf script --itrace=M)
// gave them for such records on this machine.
func TestDataSrcAsPerfGaveIt(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Record
		midr uint64
		want uint64
	}{
		{"N1 load from DRAM", Record{Class: OpLoadStore, Source: SourceDRAM}, neoverseN1, 0x1a00101042},
		{"N1 store", Record{Class: OpLoadStore, Op: 1, Source: SourceL1D}, neoverseN1, 0x1e00080024},
		{"N1 load from the other socket", Record{Class: OpLoadStore, Source: SourceRemote}, neoverseN1, 0xbe00000022},
		{"A72 store, remote access event", Record{Class: OpLoadStore, Op: 1, Events: EvRemoteAccess}, cortexA72, 0x2000000004},
		{"branch", Record{Class: OpBranch, Source: SourceDRAM}, neoverseN1, 0},
	} {
		if got := DataSrc(&c.r, c.midr); got != c.want {
			t.Errorf("%s: %#x, perf gave %#x", c.name, got, c.want)
		}
	}
}

// AmpereOne's data sources are the common encoding's under other numbers
// (perf maps DDR 0x7 to DRAM, L2D 0x9 to L2, the SLC 0x3 to the system
// cache); a number it does not map gives no level.
func TestAmpereOneSources(t *testing.T) {
	const ampereOne = 0xc00fac41
	for amp, common := range map[uint16]uint16{0x7: SourceDRAM, 0x9: SourceL2, 0x3: SourceSystemCache, 0x0: SourcePeerCore, 0x5: SourceRemote, 0x8: SourceL1D} {
		got := DataSrc(&Record{Class: OpLoadStore, Source: amp, Events: EvTLBAccess}, ampereOne)
		if want := DataSrc(&Record{Class: OpLoadStore, Source: common, Events: EvTLBAccess}, neoverseN1); got != want {
			t.Errorf("AmpereOne source %#x: %#x, want the common %#x's %#x", amp, got, common, want)
		}
	}
	if got := DataSrc(&Record{Class: OpLoadStore, Source: 0x1}, ampereOne); got != 0x2 {
		t.Errorf("unmapped AmpereOne source: %#x, want a load of no level (0x2)", got)
	}
}

// The common encoding is chosen by model, whatever the variant and
// revision; other implementers and parts go by the cache events.
func TestCommonSources(t *testing.T) {
	for midr, want := range map[uint64]bool{0x410fd0c0: true, 0x413fd0c1: true, 0x410fd4f0: true, 0x410fd890: true,
		0x410fd083: false, 0x510f8000: false, 0xc00fac30: false, 0x410fd0b0: false} {
		if CommonSources(midr) != want {
			t.Errorf("MIDR %#x: common encoding %v, want %v", midr, !want, want)
		}
	}
}

// A load record becomes perf's memory sample; a branch makes none and
// leaves the sample alone.
func TestSample(t *testing.T) {
	r := Record{Has: HasPC | HasVirtual | HasPhysical | HasTotal | HasContext | HasTimestamp | HasOp,
		PC: 0x401010, Virtual: 0x5555_0000_0100, Physical: 0x8_1234_5100, Total: 42, Class: OpLoadStore,
		Source: SourceDRAM, Context: 4243, Timestamp: 100}
	var s perfrecord.Sample
	if !r.Sample(&s, neoverseN1, perfdata.TimeConv{Mult: 40, Zero: 1000}) {
		t.Fatal("a load made no sample")
	}
	if s.IP != 0x401010 || s.Addr != 0x5555_0000_0100 || s.PhysAddr != 0x8_1234_5100 || s.Weight != 42 || s.Period != 1 ||
		s.TID != 4243 || s.Time != 5000 || s.DataSrc != 0x1a00101042 || s.Has != SampleType {
		t.Errorf("%+v", s)
	}
	b := Record{Class: OpBranch, PC: 0x1}
	if b.Sample(&s, neoverseN1, perfdata.TimeConv{}) || s.IP != 0x401010 {
		t.Errorf("a branch made a sample, or changed it: %+v", s)
	}
}
