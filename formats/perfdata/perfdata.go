// Package perfdata reads perf.data files, as `perf record`, `perf mem
// record` and `perf c2c record` write them anywhere, so the exporter's
// decoders can analyse a recording offline: the file header, the attrs
// with their ids (to attribute each record to its event), the event names
// and host facts of the feature sections, and the data section's records,
// which perfrecord decodes. Pipe-mode files (`perf record -o -`) are read
// too, their attrs coming as records. It is pure: an io.Reader in, records
// out, every malformed part an error naming its offset.
package perfdata

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

var le = binary.LittleEndian

// The file's magic as a little-endian u64 ("PERFILE2"), and as a
// big-endian host wrote it.
const (
	magic        = 0x32454c4946524550
	magicSwapped = 0x50455246494c4532
	magicV1      = 0x454c494646524550 // "PERFFILE", perf before 2010
)

// Records perf itself writes into the data section (perf's
// PERF_RECORD_USER_TYPE_START and after).
const (
	TypeHeaderAttr    = 64
	TypeFinishedRound = 68
	TypeIDIndex       = 69
	TypeAuxtraceInfo  = 70
	TypeAuxtrace      = 71
	TypeTimeConv      = 79
	TypeHeaderFeature = 80
	TypeCompressed    = 81
)

// AuxtraceHeaderSize is the fixed part of an AUXTRACE record (struct
// perf_record_auxtrace: size, offset, reference, idx, tid, cpu); its
// payload follows it.
const AuxtraceHeaderSize = 48

// maxAuxPayload bounds the AUX payload one AUXTRACE record may carry (perf
// writes at most its AUX buffer, by default 4 MiB a CPU): a file that
// claims more is refused rather than read into memory.
const maxAuxPayload = 1 << 30

// AuxtraceARMSPE is the type AUXTRACE_INFO gives Arm SPE data (perf's enum
// auxtrace_type).
const AuxtraceARMSPE = 4

// headerSize is struct perf_file_header: magic, size, attr_size, the attrs,
// data and event_types sections, and a 256-bit feature bitmap.
const (
	headerSize     = 104
	pipeHeaderSize = 16
)

// Feature bits (perf's HEADER_*) this reader uses.
const (
	featHostname  = 3
	featOSRelease = 4
	featArch      = 6
	featNRCPUs    = 7
	featCPUID     = 9
	featEventDesc = 12
	featCache     = 20
	featBits      = 256
)

// File is an open perf.data stream.
type File struct {
	// Events attributes each record to its event (Attrs), from the ids the
	// file lists.
	Events *perfrecord.Events
	// Names are the events' names as perf recorded them (EVENT_DESC), else
	// perf's spelling of the attr.
	Names []string
	// Hostname, OSRelease and Arch of the recording host, where the file says.
	Hostname, OSRelease, Arch string
	// Pipe is whether the file was written in pipe mode.
	Pipe bool
	// CPUsOnline is how many CPUs were online when perf wrote the header
	// (HEADER_NRCPUS; at the end of a recording to a file), 0 where unsaid.
	CPUsOnline int
	// CPUID is the recording CPU's identifier (HEADER_CPUID: on Arm its
	// MIDR_EL1 in hex, on x86 vendor, family, model and stepping).
	CPUID string
	// Caches are the recording host's caches (HEADER_CACHE), each with the
	// CPUs that share it: where its last-level cache domains were.
	Caches []Cache
	// Auxtrace says what the AUXTRACE records hold (AUXTRACE_INFO), and
	// TimeConv how to convert its timestamps (TIME_CONV); nil until read.
	Auxtrace *AuxtraceInfo
	TimeConv *TimeConv

	// opened holds the CPUs perf opened events on, from ID_INDEX records
	// (none for per-thread events, cpu -1).
	opened map[int]bool

	data   *bufio.Reader
	left   int64 // bytes of data section left; -1 in pipe mode (to EOF)
	offset int64 // of the next record in the file
	buf    []byte
	ids    [][]uint64
	attrs  []perfrecord.Attr
	// descNames are EVENT_DESC's names by id; stale is set when pipe-mode
	// attrs arrived since Events was built.
	descNames map[uint64]string
	stale     bool
	// z decodes perf record -z's compressed records, once one is met.
	z *zstreamer
	// pending is a pipe-mode stream's first data record, read ahead by
	// Open to take in the attrs and features before it, which Next returns
	// first.
	pending []byte
	// bo is the recording host's byte order, which the header and the
	// records are in; swapped says it is big-endian, and every record is
	// turned little-endian as it is read (perfrecord.Swap*).
	bo      binary.ByteOrder
	swapped bool
	// closed: Close was called, and Next returns ErrClosed.
	closed bool
}

// ErrClosed is what Next returns after Close.
var ErrClosed = errors.New("perf.data: read after Close")

// Close lets go of what reading holds beyond the file itself: the zstd
// decoder of perf record -z's records, which goes by itself where the
// records end or fail, and not where a reader stops early. The reader
// given to Open stays the caller's to close.
func (f *File) Close() {
	f.closed = true
	if f.z != nil {
		f.z.stop(ErrClosed)
	}
}

// AuxtraceInfo is an AUXTRACE_INFO record: the kind of AUX data (Auxtrace*)
// and its private words (Arm SPE: the PMU's type, then whether the AUX
// areas were per CPU).
type AuxtraceInfo struct {
	Type uint32
	Priv []uint64
}

// TimeConv is a TIME_CONV record: the kernel's conversion of a hardware
// counter (the TSC, Arm's generic timer) to perf's clock, from the event's
// metadata page. Cycles, Mask and the capabilities come with perf 5.11 and
// later.
type TimeConv struct {
	Shift, Mult, Zero                 uint64
	Cycles, Mask                      uint64
	CapUserTimeZero, CapUserTimeShort bool
}

// Time is the perf time (ns) of a hardware counter reading, as perf's
// tsc_to_perf_time computes it: count × Mult >> Shift, split so that it
// does not overflow, plus Zero; with a short counter (CapUserTimeShort) the
// count is first taken relative to Cycles within Mask.
func (c TimeConv) Time(count uint64) uint64 {
	if c.CapUserTimeShort {
		count = c.Cycles + (count-c.Cycles)&c.Mask
	}
	quot, rem := count>>c.Shift, count&(1<<c.Shift-1)
	return c.Zero + quot*c.Mult + rem*c.Mult>>c.Shift
}

// Open reads the header of a perf.data file. A regular file is read in
// place through r's ReadAt; a stream must be in pipe mode.
func Open(r io.Reader) (*File, error) {
	var h [pipeHeaderSize]byte
	ra, seekable := r.(io.ReaderAt)
	if f, ok := r.(interface{ Stat() (fs.FileInfo, error) }); ok && seekable {
		// An *os.File on a pipe (standard input) is a ReaderAt that cannot seek.
		st, err := f.Stat()
		seekable = err == nil && st.Mode().IsRegular()
	}
	var err error
	if seekable {
		_, err = ra.ReadAt(h[:], 0)
	} else {
		_, err = io.ReadFull(r, h[:])
	}
	if err != nil {
		return nil, fmt.Errorf("perf.data header: %w", err)
	}
	f := &File{bo: le}
	switch m := le.Uint64(h[:]); m {
	case magic:
	case magicSwapped:
		f.bo, f.swapped = binary.BigEndian, true
	case magicV1:
		return nil, errors.New("perf.data version 1 (perf before 2.6.35): not supported")
	default:
		return nil, fmt.Errorf("not a perf.data file (magic %#x)", m)
	}
	switch size := f.bo.Uint64(h[8:]); size {
	case pipeHeaderSize:
		f.Pipe = true
		f.left = -1
		f.offset = pipeHeaderSize
		if seekable {
			r = io.NewSectionReader(ra, pipeHeaderSize, 1<<62)
		}
		f.data = bufio.NewReaderSize(r, 1<<16)
		if err := f.readAhead(); err != nil {
			return nil, err
		}
		return f, nil
	case headerSize:
	default:
		return nil, fmt.Errorf("perf.data header of %d bytes: want %d (file) or %d (pipe)", size, headerSize, pipeHeaderSize)
	}
	if !seekable {
		return nil, errors.New("perf.data in file mode read from a stream: give the file, or record with -o - (pipe mode)")
	}
	if err := f.readHeader(ra); err != nil {
		return nil, err
	}
	return f, nil
}

type section struct{ off, size int64 }

func (f *File) section(b []byte) section {
	return section{int64(f.bo.Uint64(b)), int64(f.bo.Uint64(b[8:]))}
}

func (f *File) readHeader(ra io.ReaderAt) error {
	b := make([]byte, headerSize)
	if _, err := ra.ReadAt(b, 0); err != nil {
		return fmt.Errorf("perf.data header: %w", err)
	}
	attrSize := int64(f.bo.Uint64(b[16:]))
	attrs, data := f.section(b[24:]), f.section(b[40:])
	if attrSize < 64+16 || attrSize > 4096 {
		return fmt.Errorf("perf.data header: attr entries of %d bytes", attrSize)
	}
	for name, s := range map[string]section{"attr": attrs, "data": data} {
		if s.off < 0 || s.size < 0 || s.off > 1<<56 || s.size > 1<<56 {
			return fmt.Errorf("perf.data header: %s section at %d of %d bytes", name, s.off, s.size)
		}
	}
	if attrs.size%attrSize != 0 || attrs.size/attrSize > 4096 {
		return fmt.Errorf("perf.data header: attr section of %d bytes is not a whole number of %d-byte entries", attrs.size, attrSize)
	}
	entries := make([]byte, attrs.size)
	if _, err := ra.ReadAt(entries, attrs.off); err != nil {
		return fmt.Errorf("perf.data attrs at %d: %w", attrs.off, err)
	}
	for i := int64(0); i < attrs.size/attrSize; i++ {
		e := entries[i*attrSize : (i+1)*attrSize]
		if f.swapped {
			if err := perfrecord.SwapAttr(e[:attrSize-16], true); err != nil {
				return fmt.Errorf("perf.data attr %d at %d: %w", i, attrs.off+i*attrSize, err)
			}
		}
		a, err := perfrecord.ParseAttr(e[:attrSize-16])
		if err != nil {
			return fmt.Errorf("perf.data attr %d at %d: %w", i, attrs.off+i*attrSize, err)
		}
		ids, err := f.readIDs(ra, f.section(e[attrSize-16:]))
		if err != nil {
			return fmt.Errorf("perf.data attr %d: ids: %w", i, err)
		}
		f.attrs = append(f.attrs, a)
		f.ids = append(f.ids, ids)
	}
	bitmap := b[72:104]
	if f.swapped { // perf writes the bitmap as u64 words
		for w := 0; w < len(bitmap); w += 8 {
			slices.Reverse(bitmap[w : w+8])
		}
	}
	if err := f.readFeatures(ra, bitmap, data.off+data.size); err != nil {
		return err
	}
	if err := f.index(); err != nil {
		return err
	}
	f.offset, f.left = data.off, data.size
	if data.size == 0 { // perf was killed before it wrote the header back: read to the end
		f.left, data.size = -1, 1<<62
	}
	f.data = bufio.NewReaderSize(io.NewSectionReader(ra, data.off, data.size), 1<<16)
	return nil
}

func (f *File) readIDs(ra io.ReaderAt, s section) ([]uint64, error) {
	if s.size%8 != 0 || s.size < 0 || s.size > 1<<24 || s.off < 0 {
		return nil, fmt.Errorf("id section of %d bytes", s.size)
	}
	b := make([]byte, s.size)
	if _, err := ra.ReadAt(b, s.off); err != nil {
		return nil, fmt.Errorf("at %d: %w", s.off, err)
	}
	ids := make([]uint64, s.size/8)
	for i := range ids {
		ids[i] = f.bo.Uint64(b[8*i:])
	}
	return ids, nil
}

// readFeatures reads the sections of the features this reader uses; their
// index follows the data section, one entry per feature bit set.
func (f *File) readFeatures(ra io.ReaderAt, bitmap []byte, at int64) error {
	n := 0
	for bit := 0; bit < featBits; bit++ {
		if bitmap[bit/8]&(1<<(bit%8)) == 0 {
			continue
		}
		var e [16]byte
		if _, err := ra.ReadAt(e[:], at+int64(16*n)); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("perf.data is truncated: the file ends before entry %d of the feature index at byte %d, which follows the data section (copied or written incompletely?)", n, at+int64(16*n))
			}
			return fmt.Errorf("perf.data feature index entry %d at %d: %w", n, at+int64(16*n), err)
		}
		n++
		s := f.section(e[:])
		if bit != featHostname && bit != featOSRelease && bit != featArch && bit != featNRCPUs && bit != featCPUID && bit != featEventDesc && bit != featCache {
			continue
		}
		if s.size < 0 || s.size > 1<<24 || s.off < 0 {
			return fmt.Errorf("perf.data feature %d: section of %d bytes", bit, s.size)
		}
		b := make([]byte, s.size)
		if _, err := ra.ReadAt(b, s.off); err != nil {
			return fmt.Errorf("perf.data feature %d at %d: %w", bit, s.off, err)
		}
		if err := f.feature(bit, b); err != nil {
			return fmt.Errorf("perf.data feature %d at %d: %w", bit, s.off, err)
		}
	}
	return nil
}

// feature reads the section of feature bit, from the file's index or a
// pipe-mode HEADER_FEATURE record.
func (f *File) feature(bit int, b []byte) error {
	var err error
	switch bit {
	case featHostname:
		f.Hostname, _, err = f.headerString(b)
	case featOSRelease:
		f.OSRelease, _, err = f.headerString(b)
	case featArch:
		f.Arch, _, err = f.headerString(b)
	case featCPUID:
		f.CPUID, _, err = f.headerString(b)
	case featNRCPUs:
		// struct { u32 nr_cpus_avail; u32 nr_cpus_online; }
		if len(b) < 8 {
			return errors.New("NRCPUS header overruns the section")
		}
		f.CPUsOnline = int(f.bo.Uint32(b[4:]))
	case featEventDesc:
		err = f.eventDesc(b)
	case featCache:
		f.Caches, err = f.caches(b)
	}
	return err
}

// Cache is one cache level of HEADER_CACHE (perf's struct
// cpu_cache_level): its level and type, and the CPUs sharing it
// (shared_cpu_list, "0-3,8-11").
type Cache struct {
	Level      uint32
	Type, Size string
	SharedCPUs string
}

// caches reads HEADER_CACHE: u32 version (1), u32 count, then per cache
// u32 level, line_size, sets, ways and the type, size and map strings.
func (f *File) caches(b []byte) ([]Cache, error) {
	if len(b) < 8 {
		return nil, errors.New("CACHE header overruns the section")
	}
	if v := f.bo.Uint32(b); v != 1 {
		return nil, fmt.Errorf("CACHE version %d, want 1", v)
	}
	n := int(f.bo.Uint32(b[4:]))
	b = b[8:]
	var out []Cache
	for i := range n {
		if len(b) < 16 {
			return nil, fmt.Errorf("CACHE level %d overruns the section", i)
		}
		c := Cache{Level: f.bo.Uint32(b)}
		var err error
		b = b[16:]
		for _, s := range []*string{&c.Type, &c.Size, &c.SharedCPUs} {
			if *s, b, err = f.headerString(b); err != nil {
				return nil, fmt.Errorf("CACHE level %d: %w", i, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// headerString reads perf's struct perf_header_string: a u32 length (of
// the padded, NUL-terminated bytes) and the bytes.
func (f *File) headerString(b []byte) (string, []byte, error) {
	if len(b) < 4 {
		return "", nil, errors.New("string length overruns the section")
	}
	n := int(f.bo.Uint32(b))
	b = b[4:]
	if n > len(b) {
		return "", nil, fmt.Errorf("string of %d bytes overruns the section (%d left)", n, len(b))
	}
	s := b[:n]
	for i, c := range s {
		if c == 0 {
			s = s[:i]
			break
		}
	}
	return string(s), b[n:], nil
}

// eventDesc names the events: u32 count, u32 attr size, then per event the
// attr, u32 id count, the name string and the ids.
func (f *File) eventDesc(b []byte) error {
	if len(b) < 8 {
		return errors.New("EVENT_DESC header overruns the section")
	}
	nr, size := int(f.bo.Uint32(b)), int(f.bo.Uint32(b[4:]))
	b = b[8:]
	names := map[uint64]string{}
	for i := 0; i < nr; i++ {
		if len(b) < size+4 {
			return fmt.Errorf("EVENT_DESC event %d overruns the section", i)
		}
		nids := int(f.bo.Uint32(b[size:]))
		name, rest, err := f.headerString(b[size+4:])
		if err != nil {
			return fmt.Errorf("EVENT_DESC event %d name: %w", i, err)
		}
		if nids < 0 || nids > len(rest)/8 {
			return fmt.Errorf("EVENT_DESC event %d: %d ids overrun the section", i, nids)
		}
		for k := 0; k < nids; k++ {
			names[f.bo.Uint64(rest[8*k:])] = name
		}
		b = rest[8*nids:]
	}
	f.descNames = names
	return nil
}

// index builds Events and Names from the attrs read so far.
func (f *File) index() error {
	if len(f.attrs) == 0 {
		return errors.New("perf.data has no events")
	}
	ev, err := perfrecord.NewEvents(f.attrs, f.ids)
	if err != nil {
		return fmt.Errorf("perf.data events: %w", err)
	}
	f.Events, f.stale = ev, false
	f.Names = make([]string, len(f.attrs))
	for i, a := range f.attrs {
		f.Names[i] = a.Name()
		for _, id := range f.ids[i] {
			if n, ok := f.descNames[id]; ok {
				f.Names[i] = n
				break
			}
		}
	}
	return nil
}

// readAhead reads a pipe-mode stream up to its first data record, so that
// Events, Names and the features written before it (HEADER_ATTR and
// HEADER_FEATURE records) are known once Open returns, as in a file's
// header; the record is kept for Next. A stream of attrs alone has Events
// and no records.
func (f *File) readAhead() error {
	rec, err := f.Next()
	switch {
	case err == io.EOF:
		return f.index()
	case err != nil:
		return err
	}
	f.pending = append([]byte(nil), rec...)
	return nil
}

// Next returns the data section's next record, header included, valid
// until the following call; io.EOF after the last. Kernel records (and
// perf's own, such as FINISHED_ROUND) are returned as they are; pipe-mode
// attrs and features are taken in, and so are AUXTRACE_INFO and TIME_CONV
// (Auxtrace, TimeConv), which are returned too. An AUXTRACE record is
// returned with its AUX payload after its AuxtraceHeaderSize bytes (its
// header's size covers those only). Records compressed by `perf record -z`
// (COMPRESSED, COMPRESSED2: zstd) are returned decompressed, in the file's
// order (compressed.go).
func (f *File) Next() ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	if rec := f.pending; rec != nil {
		f.pending = nil
		return rec, nil
	}
	for {
		rec, raw, err := f.record()
		if err != nil {
			return nil, err
		}
		h, _ := perfrecord.ParseHeader(rec)
		if f.swapped {
			if err := f.swapBody(rec, h); err != nil {
				return nil, fmt.Errorf("perf.data record at %d, from a big-endian host: %w", f.offset-int64(len(rec)), err)
			}
		}
		switch h.Type {
		case TypeHeaderAttr:
			if err := f.headerAttr(rec); err != nil {
				return nil, fmt.Errorf("perf.data record HEADER_ATTR at %d: %w", f.offset-int64(len(rec)), err)
			}
			continue
		case TypeHeaderFeature:
			if len(rec) >= 16 {
				if err := f.feature(int(le.Uint64(rec[8:])), rec[16:]); err != nil {
					return nil, fmt.Errorf("perf.data record HEADER_FEATURE at %d: %w", f.offset-int64(len(rec)), err)
				}
			}
			continue
		case TypeIDIndex:
			f.idIndex(rec)
		case TypeAuxtrace:
			if raw && len(rec) >= 16 { // the compressed records' reader read its payload
				if rec, err = f.payload(rec, int64(le.Uint64(rec[8:]))); err != nil {
					return nil, err
				}
			}
		case TypeAuxtraceInfo:
			if err := f.auxtraceInfo(rec); err != nil {
				return nil, fmt.Errorf("perf.data record AUXTRACE_INFO at %d: %w", f.offset-int64(len(rec)), err)
			}
		case TypeTimeConv:
			if err := f.timeConv(rec); err != nil {
				return nil, fmt.Errorf("perf.data record TIME_CONV at %d: %w", f.offset-int64(len(rec)), err)
			}
		}
		if f.stale || f.Events == nil {
			if err := f.index(); err != nil {
				return nil, err
			}
		}
		return rec, nil
	}
}

// record is the next record in the file's order: as written, or out of
// perf record -z's compressed records (raw false: then an AUXTRACE
// record's payload has been read with it).
func (f *File) record() (rec []byte, raw bool, err error) {
	if f.z != nil && f.z.dec != nil {
		rec, err = f.z.next()
		return rec, false, err
	}
	at := f.offset
	if rec, err = f.next(); err != nil {
		return nil, false, err
	}
	h, _ := perfrecord.ParseHeader(rec)
	if h.Type != TypeCompressed && h.Type != TypeCompressed2 {
		return rec, true, nil
	}
	if f.z == nil {
		f.z = &zstreamer{f: f}
	}
	if err := f.z.start(rec, h); err != nil {
		return nil, false, fmt.Errorf("perf.data record at %d (perf record -z): %w", at, err)
	}
	rec, err = f.z.next()
	return rec, false, err
}

// idIndex notes the CPUs of an ID_INDEX record's entries: u64 nr, then
// per event fd {u64 id, idx, cpu, tid} (cpu -1: a per-thread event). A
// record too short for its nr is left alone; the samples are what count.
func (f *File) idIndex(rec []byte) {
	b := rec[perfrecord.HeaderSize:]
	if len(b) < 8 {
		return
	}
	nr := le.Uint64(b)
	if nr > uint64(len(b)-8)/32 {
		return
	}
	for i := range int(nr) {
		cpu := int64(le.Uint64(b[8+32*i+16:]))
		if cpu < 0 {
			continue
		}
		if f.opened == nil {
			f.opened = map[int]bool{}
		}
		f.opened[int(cpu)] = true
	}
}

// OpenedCPUs is how many distinct CPUs perf opened its events on, as the
// ID_INDEX records read so far say: 0 where they say none (per-thread
// events, or no ID_INDEX). perf record -- CMD opens a workload's events on
// the CPUs online when it starts; one that came online later is never
// recorded, with what ran there: fewer opened CPUs than CPUsOnline shows it
// (or perf record -C).
func (f *File) OpenedCPUs() int { return len(f.opened) }

func (f *File) next() ([]byte, error) {
	if f.left == 0 {
		return nil, io.EOF
	}
	var hb [perfrecord.HeaderSize]byte
	if _, err := io.ReadFull(f.data, hb[:]); err != nil {
		if err == io.EOF && f.left < 0 { // pipe mode ends at EOF
			return nil, io.EOF
		}
		return nil, fmt.Errorf("perf.data record header at %d: %w (file truncated?)", f.offset, noEOF(err))
	}
	size := int(f.bo.Uint16(hb[6:]))
	if size < perfrecord.HeaderSize {
		return nil, fmt.Errorf("perf.data record at %d: size %d is smaller than its header", f.offset, size)
	}
	if f.left >= 0 && int64(size) > f.left {
		return nil, fmt.Errorf("perf.data record at %d: %d bytes overrun the data section (%d left)", f.offset, size, f.left)
	}
	if cap(f.buf) < size {
		f.buf = make([]byte, 0, 1<<16)
	}
	rec := f.buf[:size]
	copy(rec, hb[:])
	if _, err := io.ReadFull(f.data, rec[perfrecord.HeaderSize:]); err != nil {
		return nil, fmt.Errorf("perf.data record at %d (%d bytes): %w (file truncated?)", f.offset, size, noEOF(err))
	}
	f.advance(int64(size))
	if f.swapped {
		perfrecord.SwapHeader(rec)
		swapFraming(rec)
	}
	return rec, nil
}

func (f *File) advance(n int64) {
	f.offset += n
	if f.left > 0 {
		f.left -= n
	}
}

// payload reads the n bytes of AUX data that follow an AUXTRACE record
// and returns the record with them appended.
func (f *File) payload(rec []byte, n int64) ([]byte, error) {
	if n < 0 || (f.left >= 0 && n > f.left) {
		return nil, fmt.Errorf("perf.data AUX payload of %d bytes at %d overruns the data section", n, f.offset)
	}
	if n > maxAuxPayload || len(rec) != AuxtraceHeaderSize {
		return nil, fmt.Errorf("perf.data AUXTRACE record at %d: %d bytes with a payload of %d: want %d bytes and at most %d", f.offset-int64(len(rec)), len(rec), n, AuxtraceHeaderSize, maxAuxPayload)
	}
	// Read a MiB at a time: memory grows with the data that is there, not
	// with what a damaged size claims.
	f.buf = append(f.buf[:0], rec...)
	for left := n; left > 0; {
		chunk := min(left, 1<<20)
		at := len(f.buf)
		f.buf = slices.Grow(f.buf, int(chunk))[:at+int(chunk)]
		if _, err := io.ReadFull(f.data, f.buf[at:]); err != nil {
			return nil, fmt.Errorf("perf.data AUX payload at %d: %w", f.offset+(n-left), noEOF(err))
		}
		left -= chunk
	}
	f.advance(n)
	return f.buf, nil
}

// auxtraceInfo reads an AUXTRACE_INFO record: u32 type, u32 reserved, then
// the private words.
func (f *File) auxtraceInfo(rec []byte) error {
	b := rec[perfrecord.HeaderSize:]
	if len(b) < 8 || len(b)%8 != 0 {
		return fmt.Errorf("%d bytes: want the type and whole private words", len(b))
	}
	info := &AuxtraceInfo{Type: le.Uint32(b)}
	for b = b[8:]; len(b) >= 8; b = b[8:] {
		info.Priv = append(info.Priv, le.Uint64(b))
	}
	f.Auxtrace = info
	return nil
}

// timeConv reads a TIME_CONV record: time_shift, time_mult, time_zero, and
// since perf 5.11 time_cycles, time_mask and the two capability bytes.
func (f *File) timeConv(rec []byte) error {
	b := rec[perfrecord.HeaderSize:]
	if len(b) < 24 {
		return fmt.Errorf("%d bytes: want at least shift, mult and zero (24)", len(b))
	}
	tc := &TimeConv{Shift: le.Uint64(b), Mult: le.Uint64(b[8:]), Zero: le.Uint64(b[16:]), Mask: ^uint64(0)}
	if len(b) >= 42 {
		tc.Cycles, tc.Mask = le.Uint64(b[24:]), le.Uint64(b[32:])
		tc.CapUserTimeZero, tc.CapUserTimeShort = b[40] != 0, b[41] != 0
	}
	if tc.Shift > 63 {
		return fmt.Errorf("time_shift %d: more than a 64-bit count has", tc.Shift)
	}
	f.TimeConv = tc
	return nil
}

// Synthesize adds an event whose samples the reader makes from other
// records, as perf does for AUX data (the "memory" event of Arm SPE): no
// record of the file carries its id. It returns the event's index in
// Events.Attrs and Names, and the id its samples carry.
func (f *File) Synthesize(a perfrecord.Attr, name string) (int, uint64, error) {
	id := uint64(1) << 62
	for _, ids := range f.ids {
		for _, v := range ids {
			id = max(id, v+1)
		}
	}
	f.attrs = append(f.attrs, a)
	f.ids = append(f.ids, []uint64{id})
	if err := f.index(); err != nil {
		f.attrs, f.ids = f.attrs[:len(f.attrs)-1], f.ids[:len(f.ids)-1]
		return 0, 0, err
	}
	if f.descNames == nil {
		f.descNames = map[uint64]string{}
	}
	f.descNames[id] = name // kept when pipe-mode attrs rebuild the index
	i := len(f.attrs) - 1
	f.Names[i] = name
	return i, id, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// headerAttr takes in a pipe-mode attr: the attr (its own size) then its ids.
func (f *File) headerAttr(rec []byte) error {
	body := rec[perfrecord.HeaderSize:]
	if len(body) < 8 {
		return errors.New("attr overruns the record")
	}
	size := int(le.Uint32(body[4:]))
	if size == 0 {
		size = 64
	}
	if size > len(body) || (len(body)-size)%8 != 0 {
		return fmt.Errorf("attr of %d bytes does not fit a %d-byte record with whole ids", size, len(body))
	}
	a, err := perfrecord.ParseAttr(body[:size])
	if err != nil {
		return err
	}
	ids := make([]uint64, (len(body)-size)/8)
	for i := range ids {
		ids[i] = le.Uint64(body[size+8*i:])
	}
	f.attrs = append(f.attrs, a)
	f.ids = append(f.ids, ids)
	f.stale = true
	return nil
}
