package perfrecord

import (
	"fmt"
	"math/bits"
	"slices"

	"golang.org/x/sys/unix"
)

// A perf.data file is written in its recording host's byte order (its
// header's magic says which). The decoders read little-endian records;
// the Swap functions turn a big-endian host's records into that, in
// place, field by field as perf's own readers do (session.c's swap
// functions, evsel__parse_sample): every integer is reversed by its size,
// strings, raw tracepoint data, stack dumps and AUX data are left as
// they are, and bit fields (the attr's flags, a branch entry's flags)
// keep each field's value where the little-endian layout puts it. With
// toLE false they turn little-endian records into big-endian ones (the
// tests write a big-endian file that way, for perf to read).

// swapper walks a body, reversing integers in place; the first overrun
// sets err.
type swapper struct {
	b    []byte
	off  int
	toLE bool
	err  error
}

func (s *swapper) take(n int, what string) []byte {
	if s.err != nil {
		return nil
	}
	if n < 0 || s.off+n > len(s.b) {
		s.err = fmt.Errorf("%s (%d bytes at %d) overruns the record of %d", what, n, s.off, len(s.b))
		return nil
	}
	b := s.b[s.off : s.off+n]
	s.off += n
	return b
}

// int reverses one integer of n bytes.
func (s *swapper) int(n int, what string) {
	if b := s.take(n, what); b != nil {
		slices.Reverse(b)
	}
}

// count reverses a u64 and returns its value in this host's reading.
func (s *swapper) count(what string) uint64 { return s.countN(8, what) }

// count32 is count for a u32.
func (s *swapper) count32(what string) uint32 { return uint32(s.countN(4, what)) }

// countN reverses an integer of n bytes (4 or 8) and returns its value
// in this host's reading: read after the reversal toward little-endian,
// before it away from it.
func (s *swapper) countN(n int, what string) uint64 {
	b := s.take(n, what)
	if b == nil {
		return 0
	}
	read := func() uint64 {
		if n == 8 {
			return le.Uint64(b)
		}
		return uint64(le.Uint32(b))
	}
	if !s.toLE {
		v := read()
		slices.Reverse(b)
		return v
	}
	slices.Reverse(b)
	return read()
}

func (s *swapper) words(n uint64, what string) {
	if n > uint64(len(s.b)) {
		s.err = fmt.Errorf("%d %s overrun the record", n, what)
		return
	}
	for range n {
		s.int(8, what)
	}
}

// skip passes n bytes that keep their order.
func (s *swapper) skip(n uint64, what string) {
	if n > uint64(len(s.b)) {
		s.err = fmt.Errorf("%s of %d bytes overruns the record", what, n)
		return
	}
	s.take(int(n), what)
}

// SwapHeader reverses a record header's type, misc and size.
func SwapHeader(rec []byte) {
	if len(rec) >= HeaderSize {
		slices.Reverse(rec[0:4])
		slices.Reverse(rec[4:6])
		slices.Reverse(rec[6:8])
	}
}

// SwapSample converts the body of a sample (after its header) laid out
// by l.
func SwapSample(body []byte, l Layout, toLE bool) error {
	s := swapper{b: body, toLE: toLE}
	for i := range sampleFields {
		f := &sampleFields[i]
		if l.SampleType&f.bit == 0 {
			continue
		}
		switch f.kind {
		case kindU64:
			s.int(8, f.bitName)
		case kindTID, kindCPU:
			s.int(4, f.bitName)
			s.int(4, f.bitName)
		case kindWeightStruct:
			// A big-endian kernel declares the struct's fields in
			// reverse (union perf_sample_weight), so that the u64 holds
			// them where a little-endian one does: one u64.
			s.int(8, "weight struct")
		case kindRead:
			s.swapRead(l.ReadFormat)
		case kindCallchain:
			s.words(s.count("callchain nr"), "callchain entries")
		case kindRaw:
			n := s.count32("raw size")
			s.skip(uint64(n), "raw data")
			if pad := (8 - (4+int(n))%8) % 8; pad > 0 {
				s.skip(uint64(pad), "raw padding")
			}
		case kindBranchStack:
			s.swapBranches(l.BranchSampleType)
		case kindRegs, kindRegsIntr:
			mask := l.RegsUser
			if f.kind == kindRegsIntr {
				mask = l.RegsIntr
			}
			if abi := s.count("regs abi"); abi != 0 {
				s.words(uint64(bits.OnesCount64(mask)), "registers")
			}
		case kindStackUser:
			if n := s.count("stack size"); n > 0 {
				s.skip(n, "user stack")
				s.int(8, "stack dyn_size")
			}
		case kindAux:
			s.skip(s.count("aux size"), "AUX data")
		}
	}
	return s.err
}

// swapRead converts struct read_format.
func (s *swapper) swapRead(rf uint64) {
	per := uint64(1 + bits.OnesCount64(rf&(unix.PERF_FORMAT_ID|formatLost)))
	times := uint64(bits.OnesCount64(rf & (unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING)))
	if rf&unix.PERF_FORMAT_GROUP == 0 {
		s.words(per+times, "read values")
		return
	}
	n := s.count("read group nr")
	if n > uint64(len(s.b))/8 {
		s.err = fmt.Errorf("a read group of %d values overruns the record", n)
		return
	}
	s.words(times+n*per, "read values")
}

// swapBranches converts a branch stack: nr, the index, the entries (whose
// flags are bit fields) and the counters.
func (s *swapper) swapBranches(bst uint64) {
	n := s.count("branch nr")
	if n > uint64(len(s.b))/branchEntrySize {
		s.err = fmt.Errorf("a branch stack of %d entries overruns the record", n)
		return
	}
	if bst&unix.PERF_SAMPLE_BRANCH_HW_INDEX != 0 {
		s.int(8, "branch hw_idx")
	}
	for range n {
		s.int(8, "branch from")
		s.int(8, "branch to")
		if b := s.take(8, "branch flags"); b != nil {
			if s.toLE {
				le.PutUint64(b, branchFlagsFromBE(be.Uint64(b)))
			} else {
				be.PutUint64(b, branchFlagsToBE(le.Uint64(b)))
			}
		}
	}
	if bst&unix.PERF_SAMPLE_BRANCH_COUNTERS != 0 {
		s.words(n, "branch counters")
	}
}

// branchFlagFields are struct perf_branch_entry's bit fields after from
// and to, (offset, width) in the little-endian layout; a big-endian
// compiler allocates them from the most significant bit.
var branchFlagFields = [][2]uint{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 16}, {20, 4}, {24, 2}, {26, 4}, {30, 3}, {33, 31}}

// branchFlagsFromBE moves each field of a big-endian host's flags word
// (read as a number) to its little-endian place, its value kept.
func branchFlagsFromBE(v uint64) uint64 {
	var w uint64
	for _, f := range branchFlagFields {
		w |= (v >> (64 - f[0] - f[1]) & (1<<f[1] - 1)) << f[0]
	}
	return w
}

// branchFlagsToBE is branchFlagsFromBE's inverse.
func branchFlagsToBE(w uint64) uint64 {
	var v uint64
	for _, f := range branchFlagFields {
		v |= (w >> f[0] & (1<<f[1] - 1)) << (64 - f[0] - f[1])
	}
	return v
}

// Attr flag bits wider than one (precise_ip), which reversing the word's
// bits would reverse too.
var attrWideFlags = [][2]uint{{attrPreciseIP, 2}}

// SwapAttr converts a perf_event_attr of b's length (its version: at
// least attrSizeVer0) in place.
func SwapAttr(b []byte, toLE bool) error {
	if len(b) < attrSizeVer0 {
		return fmt.Errorf("perf_event_attr: %d bytes, want at least %d", len(b), attrSizeVer0)
	}
	s := swapper{b: b, toLE: toLE}
	s.int(4, "type")
	s.int(4, "size")
	s.int(8, "config")
	s.int(8, "sample_period")
	s.int(8, "sample_type")
	s.int(8, "read_format")
	if flags := s.take(8, "flags"); flags != nil {
		// The flags are one-bit fields but precise_ip: reversing the
		// word's bits puts each one-bit field in its place.
		var v uint64
		if toLE {
			v = bits.Reverse64(be.Uint64(flags))
		} else {
			v = le.Uint64(flags)
		}
		for _, f := range attrWideFlags {
			field := v >> f[0] & (1<<f[1] - 1)
			v = v&^((1<<f[1]-1)<<f[0]) | bits.Reverse64(field)>>(64-f[1])<<f[0]
		}
		if toLE {
			le.PutUint64(flags, v)
		} else {
			be.PutUint64(flags, bits.Reverse64(v))
		}
	}
	s.int(4, "wakeup_events")
	s.int(4, "bp_type")
	s.int(8, "config1")
	// The later versions' fields, as far as b reaches: config2,
	// branch_sample_type, sample_regs_user, sample_stack_user (u32),
	// clockid (s32), sample_regs_intr, aux_watermark (u32),
	// sample_max_stack (u16), reserved (u16), aux_sample_size (u32),
	// reserved (u32), sig_data, config3.
	for _, n := range []int{8, 8, 8, 4, 4, 8, 4, 2, 2, 4, 4, 8, 8} {
		if s.off+n > len(b) {
			break
		}
		s.int(n, "attr field")
	}
	// What a newer perf added beyond these is taken as u64s.
	for s.off+8 <= len(b) {
		s.int(8, "attr field")
	}
	return s.err
}

// SwapRecord converts the body of a kernel record other than a sample:
// its own fields by its type, then the sample_id trailer laid out by
// trailerType (0: none). Types it does not know keep their bodies. The
// record's header must be little-endian: SwapHeader it before converting
// to little-endian, after converting from it.
func SwapRecord(rec []byte, trailerType uint64, toLE bool) error {
	if len(rec) < HeaderSize {
		return fmt.Errorf("record of %d bytes", len(rec))
	}
	h := Header{Type: le.Uint32(rec), Size: le.Uint16(rec[6:])}
	end := min(int(h.Size), len(rec))
	if end < HeaderSize {
		return fmt.Errorf("record type %d says it is %d bytes, less than its header", h.Type, h.Size)
	}
	trailer := 0
	if trailerType != 0 {
		trailer = TrailerSize(trailerType)
	}
	body := rec[HeaderSize:end]
	if trailer > len(body) {
		return fmt.Errorf("record type %d of %d bytes has no room for its %d-byte sample_id", h.Type, end, trailer)
	}
	s := swapper{b: body[:len(body)-trailer], toLE: toLE}
	u32s := func(n int) {
		for range n {
			s.int(4, "u32")
		}
	}
	u64s := func(n int) {
		for range n {
			s.int(8, "u64")
		}
	}
	switch h.Type {
	case TypeMmap:
		u32s(2)
		u64s(3)
	case TypeMmap2:
		u32s(2)
		u64s(3)
		if le.Uint16(rec[4:])&unix.PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
			s.skip(24, "build id") // u8 size, 3 pad, 20 bytes
		} else {
			u32s(2)
			u64s(2)
		}
		u32s(2)
	case TypeComm, unix.PERF_RECORD_ITRACE_START, TypeSwitchCPUWide:
		u32s(2)
	case unix.PERF_RECORD_EXIT, unix.PERF_RECORD_FORK:
		u32s(4)
		u64s(1)
	case TypeLost, TypeThrottle, TypeUnthrottle, TypeAux, TypeLostSamples, unix.PERF_RECORD_AUX_OUTPUT_HW_ID, unix.PERF_RECORD_CGROUP:
		n := map[uint32]int{TypeLost: 2, TypeThrottle: 3, TypeUnthrottle: 3, TypeAux: 3, TypeLostSamples: 1,
			unix.PERF_RECORD_AUX_OUTPUT_HW_ID: 1, unix.PERF_RECORD_CGROUP: 1}[h.Type]
		u64s(n)
	case unix.PERF_RECORD_NAMESPACES:
		u32s(2)
		s.words(2*s.count("namespaces nr"), "namespace links")
	case unix.PERF_RECORD_KSYMBOL:
		u64s(1)
		u32s(1)
		s.int(2, "ksym type")
		s.int(2, "ksym flags")
	case unix.PERF_RECORD_BPF_EVENT:
		s.int(2, "bpf type")
		s.int(2, "bpf flags")
		u32s(1)
	case unix.PERF_RECORD_TEXT_POKE:
		u64s(1)
		s.int(2, "old_len")
		s.int(2, "new_len")
	}
	if s.err != nil {
		return fmt.Errorf("record type %d: %w", h.Type, s.err)
	}
	if trailer > 0 {
		return swapTrailer(body[len(body)-trailer:], trailerType, toLE)
	}
	return nil
}

// swapTrailer converts a sample_id trailer: the trailer fields of st in
// the table's order, IDENTIFIER last.
func swapTrailer(b []byte, st uint64, toLE bool) error {
	s := swapper{b: b, toLE: toLE}
	for i := range sampleFields {
		f := &sampleFields[i]
		if st&f.bit&trailerFields == 0 || f.bit == unix.PERF_SAMPLE_IDENTIFIER {
			continue
		}
		if f.kind == kindTID || f.kind == kindCPU {
			s.int(4, f.bitName)
			s.int(4, f.bitName)
		} else {
			s.int(8, f.bitName)
		}
	}
	if st&unix.PERF_SAMPLE_IDENTIFIER != 0 {
		s.int(8, "identifier")
	}
	return s.err
}
