// Package memaccess holds one data access as the samplers hand it over
// (address, width, thread, CPU, load or store, where it was served) and
// makes one of a memory sample's DATA_SRC: the plain value that the
// decoders (formats/memop, kernel/perfsample, perf.data replay) give the
// line table and the detectors in analysis/locality.
package memaccess

import (
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// FromSample makes an Access of a memory sample (a PEBS, IBS or SPE sample
// with DATA_SRC); period is what a sample stands for when the record does
// not carry PERIOD. ok is false for samples that are neither a load nor a
// store (perf c2c's "unparsable"), which the table does not take.
func FromSample(s *perfrecord.Sample, period uint64) (a Access, ok bool) {
	if s.Has&unix.PERF_SAMPLE_DATA_SRC == 0 {
		return a, false
	}
	d := datasrc.Decode(s.DataSrc)
	if !d.IsLoad() && !d.IsStore() {
		return a, false
	}
	if s.Has&unix.PERF_SAMPLE_PERIOD != 0 {
		period = s.Period
	}
	served, contention := d.C2C()
	return Access{Addr: s.Addr, PID: s.PID, TID: s.TID, CPU: s.CPU, Store: d.IsStore(), Contention: contention, Served: served, Period: period, Weight: s.Weight, Time: s.Time, IP: s.IP}, true
}

// Access is one sampled load or store.
type Access struct {
	Addr     uint64 // data virtual address
	Size     uint8  // access width in bytes where the record gives it, else 0 (one byte)
	PID, TID uint32
	CPU      uint32
	Store    bool
	// Contention says whether a load was served from another core's
	// cache, as perf c2c counts it (HITM, peer snoop).
	Contention datasrc.Contention
	// Served says where it was served, as perf c2c's table counts it.
	Served datasrc.C2CCounts
	Period uint64 // events this sample stands for
	Weight uint64 // a load's latency in cycles where the PMU gives it (PEBS, IBS, SPE), else 0
	Time   uint64 // ns, the sample's timestamp (for SetWindow)
	IP     uint64 // the instruction that made the access (PEBS and IBS: exact)
}
