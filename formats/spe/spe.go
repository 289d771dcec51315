// Package spe decodes the records of Arm's Statistical Profiling Extension:
// the packets an SPE unit writes, one record per sampled operation, into the
// AUX area of its perf event (and perf record into perf.data as AUXTRACE
// data). The layouts are the Arm ARM's (D10, "Statistical Profiling
// Extension", address, counter, events, operation type, data source,
// context and timestamp packets), read as Linux's perf reads them: a record
// ends at its Timestamp packet, or at an End packet where timestamps are
// off.
package spe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is a packet's type.
type Kind uint8

// The packet kinds.
const (
	Pad Kind = iota + 1
	End
	Timestamp
	Address
	Counter
	Context
	OpType
	Events
	DataSource
)

var kindNames = [...]string{"", "pad", "end", "timestamp", "address", "counter", "context", "op-type", "events", "data-source"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Packet is one decoded packet: Index is the address, counter, context or
// operation class its header names.
type Packet struct {
	Kind    Kind
	Index   uint8
	Payload uint64
}

// ErrShort says the buffer ends inside a packet.
var ErrShort = errors.New("spe: the buffer ends inside a packet")

// HeaderError is a header byte that names no packet.
type HeaderError struct {
	Offset int
	Header []byte
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("spe: no packet has header % x (at byte %d)", e.Header, e.Offset)
}

// Header bytes (the short header, or the second byte of an extended one).
const (
	hdrPad       = 0x00
	hdrEnd       = 0x01
	hdrTimestamp = 0x71
	hdrEvents    = 0x42 // under mask 0xcf: bits 5:4 give the payload size
	hdrSource    = 0x43 // under mask 0xcf
	hdrContext   = 0x64 // under mask 0xfc: bits 1:0 the index
	hdrOpType    = 0x48 // under mask 0xfc: bits 1:0 the class
	hdrExtended  = 0x20 // under mask 0xfc: bits 1:0 extend the index
	hdrAddress   = 0xb0 // under mask 0xf8: bits 2:0 the index
	hdrCounter   = 0x98 // under mask 0xf8
	hdrAlignment = 0x00 // an extended header's second byte: pad to a boundary
)

// payloadLen is the payload size a header's bits 5:4 give: 1, 2, 4 or 8.
func payloadLen(h byte) int { return 1 << (h >> 4 & 3) }

// Next decodes the packet at b[off:], returning it and its length. The
// buffer is taken to start at an alignment boundary (the AUX area starts
// on a page), which alignment padding is measured from.
func Next(b []byte, off int) (Packet, int, error) {
	if off >= len(b) {
		return Packet{}, 0, ErrShort
	}
	h := b[off]
	ext, index := 0, uint8(0)
	var p Packet
	switch {
	case h == hdrPad:
		return Packet{Kind: Pad}, 1, nil
	case h == hdrEnd:
		return Packet{Kind: End}, 1, nil
	case h == hdrTimestamp:
		p.Kind = Timestamp
	case h&0xcf == hdrEvents:
		p.Kind = Events
	case h&0xcf == hdrSource:
		p.Kind = DataSource
	case h&0xfc == hdrContext:
		p.Kind, p.Index = Context, h&3
	case h&0xfc == hdrOpType:
		p.Kind, p.Index = OpType, h&3
	case h&0xfc == hdrExtended:
		if off+1 >= len(b) {
			return Packet{}, 0, ErrShort
		}
		ext, index, h = 1, (h&3)<<3, b[off+1]
		if h == hdrAlignment {
			align := 1 << (b[off]&0xf + 1)
			n := align - off%align
			if off+n > len(b) {
				return Packet{}, 0, ErrShort
			}
			return Packet{Kind: Pad}, n, nil
		}
	}
	if p.Kind == 0 {
		switch h & 0xf8 {
		case hdrAddress:
			p.Kind = Address
		case hdrCounter:
			p.Kind = Counter
		default:
			return Packet{}, 0, &HeaderError{Offset: off, Header: b[off : off+1+ext]}
		}
		p.Index = index | h&7
	}
	n := 1 + ext + payloadLen(h)
	if off+n > len(b) {
		return Packet{}, 0, ErrShort
	}
	v := b[off+1+ext : off+n]
	switch len(v) {
	case 1:
		p.Payload = uint64(v[0])
	case 2:
		p.Payload = uint64(binary.LittleEndian.Uint16(v))
	case 4:
		p.Payload = uint64(binary.LittleEndian.Uint32(v))
	default:
		p.Payload = binary.LittleEndian.Uint64(v)
	}
	return p, n, nil
}
