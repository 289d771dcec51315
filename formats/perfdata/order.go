package perfdata

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// Ordered hands every record to fn in the order perf script and perf
// report process them: perf record drains the CPUs' buffers in rounds, so
// records are only ordered within a CPU; perf sorts timestamped records and
// at each FINISHED_ROUND releases those no later than the newest timestamp
// of the round before, which no later round can precede. Records without a
// timestamp go out as they come. When the file turns out malformed, the
// records already read are still handed out, in order, before the error.
func (f *File) Ordered(fn func(rec []byte) error) error {
	return f.OrderedAux(nil, fn)
}

// AuxDecoder makes samples of an AUXTRACE record's data (the record as Next
// returns it, its payload appended), as perf's AUX decoders do: it calls
// emit with each sample record and its time, and emit copies it.
type AuxDecoder func(rec []byte, emit func(time uint64, sample []byte)) error

// OrderedAux is Ordered with the samples aux makes of each AUXTRACE record
// merged, by time, with the file's own records; the AUXTRACE record itself
// goes out as it comes, before them. An error of aux ends the reading as a
// malformed record does.
func (f *File) OrderedAux(aux AuxDecoder, fn func(rec []byte) error) error {
	var q queue
	var limit uint64 // records up to it may go out at the next round
	var maxTime uint64
	var readErr error
	for {
		rec, err := f.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
		h, _ := perfrecord.ParseHeader(rec)
		if h.Type == TypeAuxtrace && aux != nil {
			err := aux(rec, func(t uint64, sample []byte) {
				maxTime = max(maxTime, t)
				q.push(t, sample)
			})
			if err != nil {
				readErr = f.recordError(rec, err)
				break
			}
		}
		if h.Type == TypeFinishedRound {
			if err := q.flush(limit, fn); err != nil {
				return err
			}
			limit = maxTime
			continue
		}
		t, ok, err := f.timeOf(rec, h.Type)
		if err != nil {
			readErr = err
			break
		}
		if !ok {
			if err := fn(rec); err != nil {
				return err
			}
			continue
		}
		maxTime = max(maxTime, t)
		q.push(t, rec)
	}
	if err := q.flush(^uint64(0), fn); err != nil {
		return err
	}
	return readErr
}

// timeOf is the record's timestamp, from a sample's TIME field or a
// sample_id trailer.
func (f *File) timeOf(rec []byte, typ uint32) (uint64, bool, error) {
	ev := f.Events
	if typ == perfrecord.TypeSample {
		i, err := ev.ForSample(rec)
		if err != nil {
			return 0, false, f.recordError(rec, err)
		}
		st := ev.Attrs[i].SampleType
		if st&unix.PERF_SAMPLE_TIME == 0 {
			return 0, false, nil
		}
		off := perfrecord.HeaderSize + 8*bits.OnesCount64(st&(unix.PERF_SAMPLE_IDENTIFIER|unix.PERF_SAMPLE_IP|unix.PERF_SAMPLE_TID))
		if len(rec) < off+8 {
			return 0, false, f.recordError(rec, errors.New("sample ends before its time"))
		}
		return le.Uint64(rec[off:]), true, nil
	}
	if typ >= TypeHeaderAttr { // perf's own records carry no trailer
		return 0, false, nil
	}
	i, err := ev.ForRecord(rec)
	if err != nil || i < 0 {
		return 0, false, nil // attributed or not, a record without a usable trailer is not held back
	}
	l := ev.Attrs[i].Layout()
	if !l.SampleIDAll || l.SampleType&unix.PERF_SAMPLE_TIME == 0 {
		return 0, false, nil
	}
	sid, err := perfrecord.DecodeSampleID(rec, l)
	if err != nil {
		return 0, false, f.recordError(rec, err)
	}
	return sid.Time, true, nil
}

func (f *File) recordError(rec []byte, err error) error {
	return &RecordError{Offset: f.offset - int64(len(rec)), Err: err}
}

// RecordError is a record that could not be read, at its file offset.
type RecordError struct {
	Offset int64
	Err    error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("perf.data record at %d: %v", e.Offset, e.Err)
}
func (e *RecordError) Unwrap() error { return e.Err }

// queue holds timestamped records (copied into one arena) until a round
// releases them.
type queue struct {
	arena []byte
	items []item
	seq   int
}

type item struct {
	time     uint64
	seq      int
	off, len int
}

func (q *queue) push(t uint64, rec []byte) {
	q.items = append(q.items, item{time: t, seq: q.seq, off: len(q.arena), len: len(rec)})
	q.arena = append(q.arena, rec...)
	q.seq++
}

// flush hands out, in time order (ties in arrival order), the records no
// later than limit, and keeps the rest.
func (q *queue) flush(limit uint64, fn func([]byte) error) error {
	slices.SortFunc(q.items, func(a, b item) int {
		if a.time != b.time {
			if a.time < b.time {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
	n := 0
	for n < len(q.items) && q.items[n].time <= limit {
		it := q.items[n]
		if err := fn(q.arena[it.off : it.off+it.len]); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return nil
	}
	rest := q.items[n:]
	arena := make([]byte, 0, len(q.arena))
	for i := range rest {
		it := &rest[i]
		arena = append(arena, q.arena[it.off:it.off+it.len]...)
		it.off = len(arena) - it.len
	}
	q.items = append(q.items[:0], rest...)
	q.arena = arena
	return nil
}
