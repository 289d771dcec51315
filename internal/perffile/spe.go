package perffile

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SPEOp is one operation an Arm SPE unit sampled, as SPEPackets encodes it.
type SPEOp struct {
	PC, Virtual, Physical uint64
	Store                 bool
	Branch                bool   // a conditional branch (no data address)
	EL                    uint8  // the PC's exception level (1: the kernel)
	Total, Issue          uint16 // latencies, cycles
	Events                uint64 // the Events packet's bits
	Source                uint8  // the Data Source packet (0: none)
	Context               uint32 // CONTEXTIDR_EL1: the TID (0: no packet)
	Timestamp             uint64 // the generic timer's count; ends the record
}

// SPEPackets lays out ops as an SPE unit writes them into the AUX area,
// in the Arm ARM's packet layouts: operation type, addresses, counters,
// events, data source and context, each record ended by its timestamp.
func SPEPackets(ops ...SPEOp) []byte {
	var b []byte
	u16 := func(v uint16) []byte { return le.AppendUint16(nil, v) }
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	for _, o := range ops {
		st := byte(0)
		if o.Store {
			st = 1
		}
		if o.Branch {
			b = append(b, 0x4a, 0x01) // operation type, class branch, conditional
		} else {
			b = append(b, 0x49, st) // operation type, class load/store
		}
		// Address packets: the PC's bits 55:0 with its EL (bits 62:61)
		// non-secure (bit 63), the data address's with no tag, the
		// physical one's with NS set.
		b = append(append(b, 0xb0), u64(o.PC&(1<<56-1)|uint64(o.EL&3)<<61|1<<63)...)
		if !o.Branch {
			b = append(append(b, 0xb2), u64(o.Virtual&(1<<56-1))...)
		}
		if o.Physical != 0 {
			b = append(append(b, 0xb3), u64(o.Physical&(1<<56-1)|1<<63)...)
		}
		b = append(append(b, 0x98), u16(o.Total)...)
		b = append(append(b, 0x99), u16(o.Issue)...)
		b = append(append(b, 0x52), u16(uint16(o.Events))...) // two-byte events
		if !o.Branch {
			b = append(b, 0x43, o.Source)
		}
		if o.Context != 0 {
			b = append(append(b, 0x65), le.AppendUint32(nil, o.Context)...)
		}
		b = append(append(b, 0x71), u64(o.Timestamp)...)
	}
	return b
}

// SPE is a `perf record -e arm_spe_0/ts_enable=1,pa_enable=1/` of one
// process on an Arm server, laid out as perf 6.x writes it: the arm_spe
// event and perf's dummy tracking event, TIME_CONV, AUXTRACE_INFO (the
// version 1 layout: PMU type and per-CPU mmaps, which every perf since
// 4.16 reads; or version 2 with MIDRs), the threads' COMM records, then
// each CPU's trace as an AUXTRACE record with its payload.
type SPE struct {
	PMUType uint32 // the arm_spe PMU's type number
	MIDR    uint64 // the CPU's MIDR_EL1 (CPUID section)
	// MIDRs, where given, are each CPU's MIDR_EL1 in AUXTRACE_INFO's
	// metadata version 2 (perf 6.10 and later), which perf 6.1 cannot read.
	MIDRs   []uint64
	PID     uint32
	Comm    string
	Threads []uint32 // TIDs, the first the PID
	CPUs    uint32
	Shift   uint16 // TIME_CONV: perf time = Zero + count × Mult >> Shift
	Mult    uint32
	Zero    uint64
	Traces  []SPETrace
	// RoundEvery ends a round of perf record's reading (FINISHED_ROUND)
	// after each so many traces; 0: no rounds.
	RoundEvery int
	// Mmaps are the process's mappings, written as MMAP2 records after
	// the COMMs.
	Mmaps []SPEMmap
}

// SPEMmap is one mapping of the process: a file's text, or data ([heap]).
type SPEMmap struct {
	Start, Len uint64
	Filename   string
	Data       bool
}

// SPESwitch is a CPU's switch to thread TID of process PID at Time (perf
// time, ns).
type SPESwitch struct {
	CPU, PID, TID uint32
	Time          uint64
}

// SPETrace is a chunk of one CPU's AUX data as perf wrote it out (a CPU's
// chunks follow each other in its AUX buffer), after the context switches
// (the dummy event's context_switch: a CPU-wide switch out names the task
// coming in) that perf read in the same pass.
type SPETrace struct {
	CPU      uint32
	Data     []byte
	Switches []SPESwitch
	// AuxFlags are the flags of the kernel's AUX record for the chunk
	// (PERF_AUX_FLAG_*: truncated, partial, collision), written before it.
	AuxFlags uint64
}

// SPESampleType is what perf record asks of its dummy tracking event, and
// of the arm_spe event with PERF_SAMPLE_PHYS_ADDR besides (pa_enable).
const SPESampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID |
	unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU

// perf's record types for what it writes itself.
const (
	recFinishedRound = 68
	recAuxtraceInfo  = 70
	recAuxtrace      = 71
	recTimeConv      = 79
	auxtraceARMSPE   = 4 // enum auxtrace_type's PERF_AUXTRACE_ARM_SPE
)

// File writes the perf.data file.
func (s *SPE) File() []byte {
	spe := Attr(s.PMUType, 0x1_0000_0003, 1, SPESampleType|unix.PERF_SAMPLE_PHYS_ADDR, true, 0) // ts_enable, pa_enable
	dummy := Attr(unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_DUMMY, 1, SPESampleType, true, 0)
	// comm, mmap, task, mmap2 and context_switch (attr flag bits 9, 8,
	// 13, 23, 26).
	flags := le.Uint64(dummy[40:]) | 1<<8 | 1<<9 | 1<<13 | 1<<23 | 1<<26
	le.PutUint64(dummy[40:], flags)
	trailer := func(r *Record, pid, tid uint32, time uint64) {
		r.U32(pid).U32(tid).U64(time).U32(0).U32(0).U64(2)
	}
	// A switch record's trailer: the outgoing task (unknown here), the
	// time and the CPU, the dummy event's id.
	switchOut := func(w SPESwitch) []byte {
		var r Record
		r.U32(w.PID).U32(w.TID).U32(^uint32(0)).U32(^uint32(0)).U64(w.Time).U32(w.CPU).U32(0).U64(2)
		return r.Bytes(unix.PERF_RECORD_SWITCH_CPU_WIDE, unix.PERF_RECORD_MISC_SWITCH_OUT)
	}
	// TIME_CONV first: perf copies it when it reads AUXTRACE_INFO.
	var recs [][]byte
	var tc Record
	tc.U64(uint64(s.Shift)).U64(uint64(s.Mult)).U64(s.Zero).U64(0).U64(^uint64(0)).U64(1) // cap_user_time_zero
	recs = append(recs, tc.Bytes(recTimeConv, 0))
	var info Record
	info.U32(auxtraceARMSPE).U32(0)
	if s.MIDRs == nil {
		info.U64(uint64(s.PMUType)).U64(1) // PMU type, per-CPU mmaps
	} else {
		// Version 2: version, header words, PMU type, CPUs; per CPU the
		// magic, its number, 3 parameters: MIDR, PMU type, minimum
		// interval.
		info.U64(2).U64(4).U64(uint64(s.PMUType)).U64(uint64(len(s.MIDRs)))
		for cpu, midr := range s.MIDRs {
			info.U64(0x1010101010101010).U64(uint64(cpu)).U64(3).U64(midr).U64(uint64(s.PMUType)).U64(256)
		}
	}
	recs = append(recs, info.Bytes(recAuxtraceInfo, 0))
	for _, tid := range s.Threads {
		var c Record
		c.U32(s.PID).U32(tid).Str(s.Comm)
		trailer(&c, s.PID, tid, s.Zero)
		recs = append(recs, c.Bytes(unix.PERF_RECORD_COMM, 0))
	}
	for _, m := range s.Mmaps {
		var r Record
		prot, misc := uint32(5), uint16(unix.PERF_RECORD_MISC_USER) // r-x
		if m.Data {
			prot, misc = 3, misc|unix.PERF_RECORD_MISC_MMAP_DATA // rw-
		}
		r.U32(s.PID).U32(s.PID).U64(m.Start).U64(m.Len).U64(0).U64(0).U64(0).U64(0).U32(prot).U32(2).Str(m.Filename)
		trailer(&r, s.PID, s.PID, s.Zero)
		recs = append(recs, r.Bytes(unix.PERF_RECORD_MMAP2, misc))
	}
	// Per-CPU AUX areas: the buffer index is the CPU's, the offset runs on
	// through its buffer, the thread is unknown (-1).
	offset := map[uint32]uint64{}
	for i, t := range s.Traces {
		for _, w := range t.Switches {
			recs = append(recs, switchOut(w))
		}
		// The kernel's AUX record for the data, the SPE event's (id 1).
		var aux Record
		aux.U64(offset[t.CPU]).U64(uint64(len(t.Data))).U64(t.AuxFlags).U32(^uint32(0)).U32(^uint32(0)).U64(s.Zero).U32(t.CPU).U32(0).U64(1)
		recs = append(recs, aux.Bytes(unix.PERF_RECORD_AUX, 0))
		data := t.Data
		if pad := len(data) % 8; pad != 0 {
			data = append(data[:len(data):len(data)], make([]byte, 8-pad)...) // perf pads with zeros (SPE padding)
		}
		var a Record
		a.U64(uint64(len(data))).U64(offset[t.CPU]).U64(uint64(i) + 1).U32(t.CPU).U32(^uint32(0)).U32(t.CPU).U32(0)
		recs = append(recs, append(a.Bytes(recAuxtrace, 0), data...))
		offset[t.CPU] += uint64(len(data))
		if s.RoundEvery > 0 && (i+1)%s.RoundEvery == 0 {
			recs = append(recs, (&Record{}).Bytes(recFinishedRound, 0))
		}
	}
	host := Host{Name: "neoverse", CPUs: s.CPUs, Arch: "aarch64", CPUID: fmt.Sprintf("0x%016x", s.MIDR), NUMANodes: []string{fmt.Sprintf("0-%d", s.CPUs-1)}}
	return FileOf([]Event{{Attr: spe, IDs: []uint64{1}, Name: "arm_spe_0/ts_enable=1,pa_enable=1/"}, {Attr: dummy, IDs: []uint64{2}, Name: "dummy:u"}}, host, recs...)
}
