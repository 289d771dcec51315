package spe

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// PerfData makes the samples of an Arm SPE recording (perf record -e
// arm_spe_0/…/) from its AUX data, as perf script --itrace=M does: one
// sample of perf's "memory" event per load or store record. Decode is the
// perfdata.AuxDecoder that perfdata.File.OrderedAux merges them with.
type PerfData struct {
	// Event is the index of the synthesized memory event in the file's
	// Events.Attrs and Names.
	Event  int
	id     uint64
	layout perfrecord.Layout
	// The cores' MIDRs, which say how their data sources are encoded: per
	// CPU where AUXTRACE_INFO lists them (perf 6.10's metadata version 2),
	// else the CPUID header's for all.
	midr  uint64
	midrs map[uint32]uint64
	tc    perfdata.TimeConv
	pids  map[uint32]uint32 // TID → PID, from the COMM and FORK records read so far
	// running is each CPU's task (PID, TID) as the CPU-wide switch records
	// read so far say: a record without a context packet is its CPU's.
	running map[uint32][2]uint32
	events  *perfrecord.Events
	out     perfrecord.Sample
	buf     []byte
	// Records that are neither loads nor stores (no sample, as live:
	// Stream.Other); chunks with a packet that does not decode (what
	// follows it in the chunk is dropped), and the first such error;
	// chunks that end inside a record (the SPE driver ends them on a
	// record's end: data was lost).
	Other, Bad, Cut uint64
	First           error
}

// unknownPID marks a synthesized sample whose thread's process is not
// known yet when it is made: Fill looks it up when it goes out.
const unknownPID = ^uint32(0)

// metadata reads Arm SPE's AUXTRACE_INFO words: version 1 is the PMU
// type and whether the AUX areas are per CPU; version 2 (perf 6.10) is a
// header of version, header size (words), PMU type and CPU count, then per
// CPU magic, CPU number, parameter count, MIDR, PMU type, minimum interval.
func metadata(priv []uint64) (pmuType uint64, midrs map[uint32]uint64, err error) {
	if len(priv) == 2 {
		return priv[0], nil, nil
	}
	if len(priv) < 4 || priv[1] < 4 || priv[1] > uint64(len(priv)) {
		return 0, nil, fmt.Errorf("Arm SPE AUXTRACE_INFO of %d words: neither version 1 (2 words) nor a version 2 header", len(priv))
	}
	hdr, ncpu := int(priv[1]), priv[3]
	if ncpu == 0 || ncpu > uint64(len(priv)-hdr) || uint64(len(priv)-hdr)%ncpu != 0 || uint64(len(priv)-hdr)/ncpu < 4 {
		return 0, nil, fmt.Errorf("Arm SPE AUXTRACE_INFO version %d: %d CPUs do not share %d words of per-CPU metadata", priv[0], ncpu, len(priv)-hdr)
	}
	stride := (len(priv) - hdr) / int(ncpu)
	midrs = map[uint32]uint64{}
	for c := hdr; c < len(priv); c += stride {
		midrs[uint32(priv[c+1])] = priv[c+3]
	}
	return priv[2], midrs, nil
}

// NewPerfData sets up the decoding where file's AUXTRACE_INFO (read by now)
// says its AUX data is Arm SPE, adding perf's "memory" event; nil where it
// does not.
func NewPerfData(file *perfdata.File) (*PerfData, error) {
	info := file.Auxtrace
	if info == nil || info.Type != perfdata.AuxtraceARMSPE {
		return nil, nil
	}
	pmuType, midrs, err := metadata(info.Priv)
	if err != nil {
		return nil, err
	}
	// The synthesized event takes the SPE event's sample id fields, as
	// perf's does, so that the file's events still agree on them.
	base := -1
	for i, a := range file.Events.Attrs {
		if uint64(a.Type) == pmuType {
			base = i
			break
		}
	}
	if base < 0 {
		return nil, fmt.Errorf("AUXTRACE_INFO names Arm SPE PMU type %d, and no event of the file has it", pmuType)
	}
	a := file.Events.Attrs[base]
	mem := perfrecord.Attr{Type: unix.PERF_TYPE_HARDWARE, Period: 1, SampleIDAll: a.SampleIDAll,
		SampleType: a.SampleType&(unix.PERF_SAMPLE_IDENTIFIER|unix.PERF_SAMPLE_ID|unix.PERF_SAMPLE_PHYS_ADDR) |
			SampleType&^unix.PERF_SAMPLE_PHYS_ADDR} // physical addresses where recorded (pa_enable)
	event, id, err := file.Synthesize(mem, "memory")
	if err != nil {
		return nil, fmt.Errorf("the Arm SPE memory event: %w", err)
	}
	s := &PerfData{Event: event, layout: mem.Layout(), id: id, pids: map[uint32]uint32{}, midrs: midrs,
		running: map[uint32][2]uint32{}, events: file.Events}
	// perf reads version 1's MIDR from the CPUID header with strtol(…, 16).
	if v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(file.CPUID), "0x"), 16, 64); err == nil {
		s.midr = v
	}
	s.tc = perfdata.TimeConv{Mult: 1} // no conversion recorded: the timer's counts as they are
	if file.TimeConv != nil {
		s.tc = *file.TimeConv
	}
	return s, nil
}

// Record takes a COMM or FORK record's PID and TID, which samples whose
// thread a context packet names are given, and a CPU-wide switch out's
// next task, which its CPU's samples without one are given (as perf does
// where the kernel does not put PIDs in CONTEXTIDR). Hand it the records
// in time order, as they go out, with the samples.
func (s *PerfData) Record(rec []byte, h perfrecord.Header) {
	switch h.Type {
	case unix.PERF_RECORD_SWITCH_CPU_WIDE:
		b := rec[perfrecord.HeaderSize:]
		if h.Misc&unix.PERF_RECORD_MISC_SWITCH_OUT == 0 || len(b) < 8 {
			return
		}
		i, err := s.events.ForRecord(rec)
		if err != nil || i < 0 {
			return
		}
		sid, err := perfrecord.DecodeSampleID(rec, s.events.Attrs[i].Layout())
		if err != nil || s.events.Attrs[i].SampleType&unix.PERF_SAMPLE_CPU == 0 {
			return
		}
		s.running[sid.CPU] = [2]uint32{binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])}
	case perfrecord.TypeComm:
		if c, err := perfrecord.DecodeComm(rec); err == nil {
			s.pids[c.TID] = c.PID
		}
	case unix.PERF_RECORD_FORK:
		if b := rec[perfrecord.HeaderSize:]; len(b) >= 16 { // pid, ppid, tid, ptid
			s.pids[binary.LittleEndian.Uint32(b[8:])] = binary.LittleEndian.Uint32(b)
		}
	}
}

// Fill gives a sample of the memory event, as it goes out, the PID of its
// thread where that was not known when the sample was made, and the task
// running on its CPU where no context packet named its thread.
func (s *PerfData) Fill(smp *perfrecord.Sample) {
	if smp.TID == unknownPID { // no context packet: the CPU's running task
		if t, ok := s.running[smp.CPU]; ok {
			smp.PID, smp.TID = t[0], t[1]
			return
		}
	}
	if smp.PID == unknownPID {
		if pid, ok := s.pids[smp.TID]; ok {
			smp.PID = pid
		}
	}
}

// Decode is the perfdata.AuxDecoder: each load or store record of an
// AUXTRACE record's payload becomes a sample of the memory event, on the
// buffer's CPU, its thread the context packet's (else the buffer's, in
// per-thread mode). As in perf, a chunk is decoded on its own.
func (s *PerfData) Decode(rec []byte, emit func(uint64, []byte)) error {
	if len(rec) < perfdata.AuxtraceHeaderSize {
		return nil
	}
	le := binary.LittleEndian
	tid, cpu := le.Uint32(rec[36:]), le.Uint32(rec[40:])
	midr := s.midr
	if s.midrs != nil {
		// Per-thread buffers (CPU -1) take the first CPU's, as perf does
		// on a machine of one core type.
		m, ok := s.midrs[cpu]
		if !ok {
			m = s.midrs[slices.Min(slices.Collect(maps.Keys(s.midrs)))]
		}
		midr = m
	}
	data := rec[perfdata.AuxtraceHeaderSize:]
	n, err := Records(data, func(r *Record) {
		o := &s.out
		*o = perfrecord.Sample{}
		if !r.Sample(o, midr, s.tc) {
			s.Other++
			return
		}
		o.ID, o.CPU, o.PID = s.id, cpu, unknownPID
		if r.Has&HasContext == 0 {
			o.TID = tid // -1 where the buffer is a CPU's: unknown
		}
		var aerr error
		if s.buf, aerr = perfrecord.AppendSample(s.buf[:0], s.layout, o); aerr == nil {
			emit(o.Time, s.buf)
		}
	})
	switch {
	case err != nil:
		s.Bad++
		if s.First == nil {
			s.First = fmt.Errorf("Arm SPE data of CPU %d: %w", cpu, err)
		}
	case n < len(data):
		s.Cut++
	}
	return nil
}
