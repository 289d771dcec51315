package perfrecord

import (
	"fmt"
	"math/bits"

	"golang.org/x/sys/unix"
)

// Events says which event wrote a record when several share one buffer (a
// group's members, perf mem's leader and loads, every event of a perf.data
// file). The kernel puts the event's id at a fixed place in its records:
// with PERF_SAMPLE_IDENTIFIER first in a sample and last in the sample_id
// trailer of other records; with only PERF_SAMPLE_ID after the fields that
// precede it. All events of a buffer must agree on those places, as perf
// itself requires, or a record could not be attributed.
type Events struct {
	Attrs []Attr
	// Layouts are the Attrs' layouts, made once: DecodeSample takes one
	// by pointer (a Layout passed by value no longer fits the registers
	// of a call, which cost the fixed layouts a quarter of their time).
	Layouts []Layout
	ids     []uint64 // ids[i] belongs to Attrs[owner[i]]; small sets are scanned
	owner   []int
	byID    map[uint64]int
	// samplePos is the id's index in u64 words after a sample's header,
	// trailerPos its index from the end of a non-sample record's trailer
	// (1: the last word); -1 where records carry no id.
	samplePos, trailerPos int
}

// scanLimit is how many ids are searched linearly before a map pays off.
const scanLimit = 16

// NewEvents maps ids[i] to attrs[i]. A single event needs no ids.
func NewEvents(attrs []Attr, ids [][]uint64) (*Events, error) {
	if len(attrs) == 0 {
		return nil, fmt.Errorf("decode records: no event attributes (perf_event_attr) to read them with: a recording must describe its events before its records")
	}
	if len(ids) != len(attrs) {
		return nil, fmt.Errorf("%d events with %d id lists", len(attrs), len(ids))
	}
	e := &Events{Attrs: attrs, samplePos: samplePos(attrs[0].SampleType), trailerPos: trailerPos(attrs[0].SampleType)}
	for _, a := range attrs {
		e.Layouts = append(e.Layouts, a.Layout())
	}
	for i, a := range attrs {
		if err := a.Layout().Check(); err != nil {
			return nil, fmt.Errorf("event %d (%s): %w", i, a.Name(), err)
		}
		if len(attrs) == 1 {
			break
		}
		if p := samplePos(a.SampleType); p != e.samplePos || p < 0 {
			return nil, fmt.Errorf("event %d (%s) shares a buffer but its samples carry the id at word %d, the first event's at %d (-1: none); record with PERF_SAMPLE_IDENTIFIER",
				i, a.Name(), p, e.samplePos)
		}
		if a.SampleIDAll && trailerPos(a.SampleType) != e.trailerPos {
			return nil, fmt.Errorf("event %d (%s): its other records carry the id at a different place than the first event's", i, a.Name())
		}
		for _, id := range ids[i] {
			if prev, dup := e.find(id); dup {
				return nil, fmt.Errorf("id %d belongs to both event %d and event %d", id, prev, i)
			}
			e.ids = append(e.ids, id)
			e.owner = append(e.owner, i)
		}
	}
	if len(e.ids) > scanLimit {
		e.byID = make(map[uint64]int, len(e.ids))
		for k, id := range e.ids {
			e.byID[id] = e.owner[k]
		}
	}
	return e, nil
}

// ByID is the index in Attrs of the event whose records carry id (a
// PERF_SAMPLE_READ value's, say).
func (e *Events) ByID(id uint64) (int, bool) { return e.find(id) }

func (e *Events) find(id uint64) (int, bool) {
	if e.byID != nil {
		i, ok := e.byID[id]
		return i, ok
	}
	for k, v := range e.ids {
		if v == id {
			return e.owner[k], true
		}
	}
	return -1, false
}

// samplePos is where a sample of this sample_type carries its id.
func samplePos(st uint64) int {
	if st&unix.PERF_SAMPLE_IDENTIFIER != 0 {
		return 0
	}
	if st&unix.PERF_SAMPLE_ID == 0 {
		return -1
	}
	return bits.OnesCount64(st & (unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_ADDR))
}

// trailerPos is where a sample_id trailer carries the id, counted from
// the record's end.
func trailerPos(st uint64) int {
	if st&unix.PERF_SAMPLE_IDENTIFIER != 0 {
		return 1
	}
	if st&unix.PERF_SAMPLE_ID == 0 {
		return -1
	}
	return 1 + bits.OnesCount64(st&(unix.PERF_SAMPLE_STREAM_ID|unix.PERF_SAMPLE_CPU))
}

// IDOffset is where in a sample record (header included) its event's id
// is, -1 where the samples carry none.
func (e *Events) IDOffset() int {
	if e.samplePos < 0 {
		return -1
	}
	return HeaderSize + 8*e.samplePos
}

// ForSample is the index in Attrs of the event that wrote sample rec.
func (e *Events) ForSample(rec []byte) (int, error) {
	if len(e.Attrs) == 1 {
		return 0, nil
	}
	off := HeaderSize + 8*e.samplePos
	if len(rec) < off+8 {
		return -1, fmt.Errorf("sample of %d bytes ends before its id at byte %d", len(rec), off)
	}
	return e.lookup(le.Uint64(rec[off:]))
}

// ForRecord is the index in Attrs of the event that wrote a non-sample
// record, from its sample_id trailer; -1 without error when the records
// carry none (no sample_id_all).
func (e *Events) ForRecord(rec []byte) (int, error) {
	if len(e.Attrs) == 1 {
		return 0, nil
	}
	if e.trailerPos < 0 || !e.Attrs[0].SampleIDAll {
		return -1, nil
	}
	off := len(rec) - 8*e.trailerPos
	if off < HeaderSize {
		return -1, fmt.Errorf("record of %d bytes has no room for a sample_id trailer", len(rec))
	}
	return e.lookup(le.Uint64(rec[off:]))
}

func (e *Events) lookup(id uint64) (int, error) {
	if i, ok := e.find(id); ok {
		return i, nil
	}
	return -1, fmt.Errorf("record of unknown event id %d", id)
}

// SampleID is the sample_id trailer the kernel appends to non-sample
// records of an event with sample_id_all: who, when and where.
type SampleID struct {
	PID, TID     uint32
	Time         uint64
	ID, StreamID uint64
	CPU          uint32
}

// TrailerSize is the size of a sample_id trailer for sample_type st.
func TrailerSize(st uint64) int {
	return 8 * bits.OnesCount64(st&trailerFields)
}

// DecodeSampleID reads the trailer at the end of the non-sample record rec
// written by an event with layout l; without sample_id_all it is zero.
func DecodeSampleID(rec []byte, l Layout) (SampleID, error) {
	var s SampleID
	if !l.SampleIDAll {
		return s, nil
	}
	h, err := ParseHeader(rec)
	if err != nil {
		return s, err
	}
	if h.Type == TypeSample {
		return s, fmt.Errorf("a sample has no sample_id trailer")
	}
	n := TrailerSize(l.SampleType)
	end := min(int(h.Size), len(rec))
	if end-HeaderSize < n {
		return s, fmt.Errorf("record type %d of %d bytes: no room for its %d-byte sample_id trailer", h.Type, end, n)
	}
	var smp Sample
	err = decodeTrailer(rec[end-n:end], l.SampleType, &smp)
	s = SampleID{PID: smp.PID, TID: smp.TID, Time: smp.Time, ID: smp.ID, StreamID: smp.StreamID, CPU: smp.CPU}
	return s, err
}
