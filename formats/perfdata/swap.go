package perfdata

import (
	"fmt"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// A big-endian host's file is turned little-endian record by record as it
// is read. Its framing comes first, as each record is read from the file
// (the header, and the sizes that say how much more to read: an AUXTRACE
// record's and COMPRESSED2's); the body when the record is returned,
// when the events that lay out a sample are known.

// swapFraming turns the fields that frame rec (header already swapped)
// little-endian.
func swapFraming(rec []byte) {
	h, _ := perfrecord.ParseHeader(rec)
	b := rec[perfrecord.HeaderSize:]
	switch {
	case h.Type == TypeAuxtrace && len(b) >= AuxtraceHeaderSize-perfrecord.HeaderSize:
		// u64 size, offset, reference; u32 idx, tid, cpu, reserved
		for i := 0; i < 24; i += 8 {
			slices.Reverse(b[i : i+8])
		}
		for i := 24; i < 40; i += 4 {
			slices.Reverse(b[i : i+4])
		}
	case h.Type == TypeCompressed2 && len(b) >= 8:
		slices.Reverse(b[:8]) // data_size
	}
}

// swapBody turns the body of record rec (header little-endian, framing
// swapped) little-endian: kernel records by their event's layout,
// perf's own by their type; the ones this reader does not read keep
// their bodies.
func (f *File) swapBody(rec []byte, h perfrecord.Header) error {
	b := rec[perfrecord.HeaderSize:]
	words := func(from int) {
		for i := from; i+8 <= len(b); i += 8 {
			slices.Reverse(b[i : i+8])
		}
	}
	switch h.Type {
	case perfrecord.TypeSample:
		if f.stale || f.Events == nil {
			if err := f.index(); err != nil {
				return err
			}
		}
		i := 0
		if len(f.attrs) > 1 {
			off := f.Events.IDOffset()
			if off < 0 || off+8 > len(rec) {
				return fmt.Errorf("sample of %d bytes has no event id", len(rec))
			}
			var ok bool
			if i, ok = f.Events.ByID(f.bo.Uint64(rec[off:])); !ok {
				return fmt.Errorf("sample of unknown event id %d", f.bo.Uint64(rec[off:]))
			}
		}
		return perfrecord.SwapSample(b, f.attrs[i].Layout(), true)
	case TypeHeaderAttr:
		if len(b) < 8 {
			return fmt.Errorf("HEADER_ATTR of %d bytes", len(b))
		}
		size := int(f.bo.Uint32(b[4:]))
		if size == 0 {
			size = 64
		}
		if size > len(b) {
			return fmt.Errorf("HEADER_ATTR: attr of %d bytes in a record of %d", size, len(b))
		}
		if err := perfrecord.SwapAttr(b[:size], true); err != nil {
			return err
		}
		words(size)
	case TypeHeaderFeature:
		if len(b) >= 8 {
			slices.Reverse(b[:8]) // the feature's bit; its section is read in f.bo
		}
	case TypeIDIndex, TypeTimeConv:
		words(0)
	case TypeAuxtraceInfo:
		if len(b) >= 8 {
			slices.Reverse(b[0:4]) // type
			slices.Reverse(b[4:8]) // reserved
			words(8)
		}
	default:
		if h.Type < TypeHeaderAttr { // the kernel's
			var trailer uint64
			if len(f.attrs) > 0 && f.attrs[0].SampleIDAll {
				trailer = f.attrs[0].SampleType
			}
			return perfrecord.SwapRecord(rec, trailer, true)
		}
	}
	return nil
}
