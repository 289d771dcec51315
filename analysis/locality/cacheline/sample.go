package cacheline

import (
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// AccessOf makes an Access of a memory sample (a PEBS, IBS or SPE sample
// with DATA_SRC); period is what a sample stands for when the record does
// not carry PERIOD. ok is false for samples that are neither a load nor a
// store (perf c2c's "unparsable"), which the table does not take.
func AccessOf(s *perfrecord.Sample, period uint64) (a Access, ok bool) {
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
