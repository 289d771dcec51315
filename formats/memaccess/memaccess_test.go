package memaccess

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// TestFromSample builds perf_mem_data_src values by hand from the ABI's bit
// positions (mem_op bits 0-4, mem_lvl 5-18, mem_snoop 19-23) and checks
// what an access keeps of each: the local HITM load perf c2c counts as
// contended, a store, the period's source, and the samples that are
// neither a load nor a store.
func TestFromSample(t *testing.T) {
	const (
		opLoad, opStore, opExec = 0x02, 0x04, 0x10
		lvlHitL3, lvlHitL1      = 0x42 << 5, 0x0a << 5 // PERF_MEM_LVL_HIT (0x02) | L3 (0x40), | L1 (0x08)
		snoopHITM               = 0x10 << 19
	)
	base := perfrecord.Sample{Has: unix.PERF_SAMPLE_DATA_SRC, Addr: 0x7f00_0040, PID: 7, TID: 8, CPU: 1, Time: 99, IP: 0x401000, Weight: 180}

	load := base
	load.DataSrc = opLoad | lvlHitL3 | snoopHITM
	a, ok := FromSample(&load, 1000)
	if !ok || a.Store || a.Contention != datasrc.ContLocalHITM || a.Period != 1000 || a.Addr != 0x7f00_0040 || a.Weight != 180 || a.TID != 8 || a.IP != 0x401000 {
		t.Errorf("HITM load: %+v ok=%v, want a contended (local HITM) load of period 1000", a, ok)
	}

	store := base
	store.Has |= unix.PERF_SAMPLE_PERIOD
	store.Period = 37
	store.DataSrc = opStore | lvlHitL1
	if a, ok := FromSample(&store, 1000); !ok || !a.Store || a.Contention != 0 || a.Period != 37 {
		t.Errorf("store with PERIOD 37: %+v ok=%v, want an uncontended store of period 37", a, ok)
	}

	for _, s := range []perfrecord.Sample{
		{Has: unix.PERF_SAMPLE_DATA_SRC, DataSrc: opExec}, // an instruction fetch: neither
		{Addr: 0x1000},                   // no DATA_SRC
		{Has: unix.PERF_SAMPLE_DATA_SRC}, // op NA (0): perf c2c's unparsable
	} {
		if a, ok := FromSample(&s, 1); ok {
			t.Errorf("data source %#x (has %#x): took %+v, want not a load or store", s.DataSrc, s.Has, a)
		}
	}
}
