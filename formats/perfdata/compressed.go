package perfdata

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// perf record -z writes the records it reads from the kernel's rings as
// one zstd stream (tools/perf/util/zstd.c: ZSTD_compressStream, flushed at
// the end of each COMPRESSED record, never ended), cut into COMPRESSED
// records; a record of the stream may span two of them (a ring's wrap).
// Between them stand the records perf writes itself, uncompressed:
// FINISHED_ROUND after each pass over the rings, AUXTRACE with its AUX
// data. Those come at a record boundary of the stream, after everything
// the compressed records before them hold.
//
// zstreamer decodes the stream as the records are read: the decoder asks
// for input (Read) only when it has handed out all it decoded (concurrency
// 1: exact reads, no read-ahead), so an uncompressed record met while
// fetching its input goes out before the record being decoded.
type zstreamer struct {
	f       *File
	dec     *zstd.Decoder
	in      []byte   // the current COMPRESSED record's data not yet fed
	pending [][]byte // uncompressed records met while fetching input
	rec     []byte   // the decoded record handed out last
	// end is what ended the stream (io.EOF at the file's end, the error
	// that stopped it, or Close): next returns it from then on, the
	// decoder let go.
	end error
}

// Types of perf's compressed records: COMPRESSED (perf up to 6.14) and
// COMPRESSED2, whose data size is given and padded to 8 bytes.
const (
	TypeCompressed2 = 83
)

// zMaxWindow bounds the decoder's memory to the largest window perf's
// levels can ask for: 512 KiB at its default, 1, up to 2^27 bytes at 22,
// zstd's limit for its levels when the size is not known in advance.
const zMaxWindow = 1 << 27

// compressedData is the zstd data of a COMPRESSED or COMPRESSED2 record.
func compressedData(rec []byte, h perfrecord.Header) ([]byte, error) {
	if h.Type == TypeCompressed {
		return rec[perfrecord.HeaderSize:], nil
	}
	b := rec[perfrecord.HeaderSize:]
	if len(b) < 8 {
		return nil, errors.New("COMPRESSED2 record without its data size")
	}
	n := le.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("COMPRESSED2 record of %d bytes says it holds %d", len(rec), n)
	}
	return b[8 : 8+n], nil
}

// Read feeds the decoder the compressed records' data in file order,
// putting the uncompressed records between them aside.
func (z *zstreamer) Read(p []byte) (int, error) {
	for len(z.in) == 0 {
		at := z.f.offset
		rec, err := z.f.next()
		if err != nil {
			return 0, err
		}
		h, _ := perfrecord.ParseHeader(rec)
		switch h.Type {
		case TypeCompressed, TypeCompressed2:
			data, err := compressedData(rec, h)
			if err != nil {
				return 0, fmt.Errorf("perf.data record at %d: %w", at, err)
			}
			z.in = append(z.in[:0], data...)
		default:
			if h.Type == TypeAuxtrace && len(rec) >= 16 {
				if rec, err = z.f.payload(rec, int64(le.Uint64(rec[8:]))); err != nil {
					return 0, err
				}
			}
			z.pending = append(z.pending, append([]byte(nil), rec...))
		}
	}
	n := copy(p, z.in)
	z.in = z.in[n:]
	return n, nil
}

// start begins decoding at the first compressed record, rec.
func (z *zstreamer) start(rec []byte, h perfrecord.Header) error {
	data, err := compressedData(rec, h)
	if err != nil {
		return err
	}
	z.in = append(z.in[:0], data...)
	if z.dec == nil {
		if z.dec, err = zstd.NewReader(z, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zMaxWindow), zstd.WithDecoderMaxMemory(zMaxWindow)); err != nil {
			return err
		}
	}
	return nil
}

// next is the stream's next record, or one put aside before it; io.EOF
// where the file ends at a record boundary of the stream. Where the stream
// ends, or fails, the decoder goes.
func (z *zstreamer) next() ([]byte, error) {
	if z.end != nil {
		return nil, z.end
	}
	rec, err := z.decode()
	if err != nil {
		z.stop(err)
	}
	return rec, err
}

// decode is next's work.
func (z *zstreamer) decode() ([]byte, error) {
	if len(z.pending) > 0 {
		return z.pop(), nil
	}
	var hb [perfrecord.HeaderSize]byte
	n, err := io.ReadFull(z.dec, hb[:])
	if n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		// The file ended where a record of the stream would begin (perf
		// never ends the zstd frame).
		if len(z.pending) > 0 {
			return z.pop(), nil
		}
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("perf.data compressed records, before byte %d: %w", z.f.offset, noEOF(err))
	}
	size := int(z.f.bo.Uint16(hb[6:]))
	if size < perfrecord.HeaderSize {
		return nil, fmt.Errorf("perf.data compressed records, before byte %d: a record of size %d, smaller than its header", z.f.offset, size)
	}
	z.rec = append(z.rec[:0], hb[:]...)
	z.rec = append(z.rec, make([]byte, size-perfrecord.HeaderSize)...)
	if _, err := io.ReadFull(z.dec, z.rec[perfrecord.HeaderSize:]); err != nil {
		return nil, fmt.Errorf("perf.data compressed records, before byte %d: a record of %d bytes: %w", z.f.offset, size, noEOF(err))
	}
	if z.f.swapped {
		perfrecord.SwapHeader(z.rec)
	}
	switch typ := le.Uint32(z.rec); typ {
	case TypeCompressed, TypeCompressed2, TypeAuxtrace:
		return nil, fmt.Errorf("perf.data compressed records, before byte %d: a record of type %d inside them", z.f.offset, typ)
	}
	if len(z.pending) > 0 {
		// Fetching this record's input met records that come before it.
		z.pending = append(z.pending, append([]byte(nil), z.rec...))
		return z.pop(), nil
	}
	return z.rec, nil
}

func (z *zstreamer) pop() []byte {
	rec := z.pending[0]
	z.pending = z.pending[1:]
	return rec
}

// stop ends the stream with err, letting the decoder go.
func (z *zstreamer) stop(err error) {
	if z.end != nil {
		return
	}
	z.end = err
	if z.dec != nil {
		z.dec.Close()
	}
}
