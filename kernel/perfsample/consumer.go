package perfsample

import (
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// Consumer takes what the rings hold, as plain values: the samples and
// what the rings say of the records they could not give. A read pass is
// Begin, the records, End. collector/ wires analysis/locality/feed.Sink
// here, which counts them and hands the address sampler's to its decoder.
type Consumer interface {
	Begin()
	// End closes the pass: every ring was read up to cut
	// (CLOCK_MONOTONIC ns); 0 where one CPU's rings were drained before
	// it closes.
	End(cut uint64)
	// Sample is a sample of config ev (the sampler's Configs()[ev], which
	// says how to take it: decoded, a memory sample, ...), valid during
	// the call only.
	Sample(ev int, c *sampling.Config, s *perfrecord.Sample)
	Lost(ev int, n uint64)         // records the ring or the PMU dropped
	Throttled(ev int)              // a THROTTLE record
	Error(reason string)           // a record not read: "decode", "ring", "aux"
	Filtered(ev int, n uint64)     // AUX records the decoder left out (not a load or store)
	AuxFlags(ev int, flags uint64) // an AUX record's loss flags
	Mapped(m perfrecord.Mmap)      // a new executable mapping
	Exec(pid uint32)               // a process ran a new program
	// Seen fills each config's samples, lost and filtered records so far,
	// which the period governor reads.
	Seen(out []uint64)
}
