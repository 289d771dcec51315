package spe

import (
	"fmt"
	"sort"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// Stream makes the samples of one CPU's SPE data as it is read live: the
// chunks of the AUX area that the kernel's AUX records announce, and the
// CPU-wide context switches (the SPE event's context_switch records) that
// say which task ran when. A chunk's records all come before its AUX
// record in the CPU's data area, and so do the switches made while they
// were taken: each record gets the task that ran at its time, as perf
// script gives it reading the same records from a perf.data file. The
// samples are those of PerfData (perf's "memory" event), times on perf's
// clock.
type Stream struct {
	CPU  uint32
	MIDR uint64            // the CPU's MIDR_EL1: how its data sources are encoded
	TC   perfdata.TimeConv // the counter's conversion to perf's clock (the ring's metadata page)

	// tasks are the switches not yet behind every record decoded, in
	// time order; the first is the task running before the others (time
	// 0 where it is the first one seen).
	tasks []taskAt
	// pids are the processes of the threads the switches named, for
	// records whose context packet names a thread the switches at their
	// time do not.
	pids map[uint32]uint32
	out  perfrecord.Sample

	// Records that are neither loads nor stores (no sample); chunks with
	// a packet that does not decode (the rest of the chunk dropped), the
	// first such error; chunks that end inside a record; switches
	// forgotten because too many came between two chunks.
	Other, Bad, Cut, Forgot uint64
	First                   error
}

type taskAt struct {
	time     uint64
	pid, tid uint32
}

// Unknown is the PID and TID of a sample whose task is not known: a
// record taken before the first switch seen, with no context packet.
const Unknown = ^uint32(0)

// maxTasks bounds the switches held between two chunks (an idle CPU fills
// its AUX area slowly while its tasks switch often); beyond it the oldest
// are forgotten, and a record older than every switch held gets the
// oldest's task.
const maxTasks = 8192

// maxPIDs bounds the thread → process map; past it, it starts over.
const maxPIDs = 1 << 16

// Switch says that the CPU switched to task (pid, tid) at time (perf's
// clock): a CPU-wide switch out's next task. Switches come in time order.
func (s *Stream) Switch(time uint64, pid, tid uint32) {
	if len(s.tasks) >= maxTasks {
		n := len(s.tasks) - maxTasks + 1
		s.tasks = append(s.tasks[:0], s.tasks[n:]...)
		s.Forgot += uint64(n)
	}
	s.tasks = append(s.tasks, taskAt{time, pid, tid})
	if s.pids == nil || len(s.pids) >= maxPIDs {
		s.pids = map[uint32]uint32{}
	}
	s.pids[tid] = pid
}

// taskAt is the task that ran at time t: the last switch at or before it.
func (s *Stream) taskAt(t uint64) (taskAt, bool) {
	i := sort.Search(len(s.tasks), func(i int) bool { return s.tasks[i].time > t })
	switch {
	case i > 0:
		return s.tasks[i-1], true
	case len(s.tasks) > 0 && s.Forgot > 0: // older than the switches held
		return s.tasks[0], true
	}
	return taskAt{}, false
}

// Chunk decodes one AUX chunk, calling emit with the sample of each load
// or store record (the same Sample each time: copy it to keep it), its
// CPU the stream's, its Period 1. A chunk is decoded on its own, as perf
// does: the SPE driver ends each on a record's end.
func (s *Stream) Chunk(data []byte, emit func(*perfrecord.Sample)) {
	last, timed := uint64(0), false
	n, err := Records(data, func(r *Record) {
		o := &s.out
		*o = perfrecord.Sample{}
		if !r.Sample(o, s.MIDR, s.TC) {
			s.Other++
			return
		}
		o.CPU = s.CPU
		t := o.Time
		if r.Has&HasTimestamp != 0 {
			last, timed = t, true
		} else {
			t = ^uint64(0) // untimed: the task running now
		}
		task, known := s.taskAt(t)
		switch {
		case r.Has&HasContext != 0 && known && task.tid == r.Context:
			o.PID = task.pid
		case r.Has&HasContext != 0:
			o.PID = Unknown
			if pid, ok := s.pids[r.Context]; ok {
				o.PID = pid
			}
		case known:
			o.PID, o.TID = task.pid, task.tid
		default:
			o.PID, o.TID = Unknown, Unknown
		}
		emit(o)
	})
	switch {
	case err != nil:
		s.Bad++
		if s.First == nil {
			s.First = fmt.Errorf("Arm SPE data of CPU %d: %w", s.CPU, err)
		}
	case n < len(data):
		s.Cut++
	}
	// Later records are later than this chunk's last: keep the task that
	// ran then and the switches after it.
	if !timed {
		last = ^uint64(0)
	}
	if i := sort.Search(len(s.tasks), func(i int) bool { return s.tasks[i].time > last }); i > 1 {
		s.tasks = append(s.tasks[:0], s.tasks[i-1:]...)
	}
}
