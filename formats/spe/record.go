package spe

// Address packet indexes.
const (
	AddrPC         = 0 // the sampled instruction
	AddrTarget     = 1 // a branch's target
	AddrVirtual    = 2 // the data access's virtual address
	AddrPhysical   = 3 // and its physical address
	AddrPrevBranch = 4 // the previous branch's target
)

// Counter packet indexes.
const (
	CountTotal       = 0 // cycles from dispatch to completion
	CountIssue       = 1 // cycles from dispatch to issue
	CountTranslation = 2 // cycles of the address translation
)

// Event bits of the Events packet.
const (
	EvExceptionGen = 1 << 0
	EvRetired      = 1 << 1
	EvL1DAccess    = 1 << 2
	EvL1DRefill    = 1 << 3
	EvTLBAccess    = 1 << 4
	EvTLBWalk      = 1 << 5
	EvNotTaken     = 1 << 6
	EvMispredicted = 1 << 7
	EvLLCAccess    = 1 << 8
	EvLLCMiss      = 1 << 9
	EvRemoteAccess = 1 << 10
	EvAlignment    = 1 << 11
)

// OpClass is the Operation Type packet's class.
type OpClass uint8

// The operation classes.
const (
	OpOther     OpClass = 0
	OpLoadStore OpClass = 1 // loads, stores and atomics
	OpBranch    OpClass = 2
)

// Field bits say which packets a record held.
const (
	HasPC = 1 << iota
	HasTarget
	HasVirtual
	HasPhysical
	HasTotal
	HasIssue
	HasTranslation
	HasEvents
	HasOp
	HasSource
	HasContext
	HasTimestamp
)

// Record is one sampled operation.
type Record struct {
	Has uint32 // Has* bits
	// PC and Target are instruction addresses: bits 55:0, the top byte
	// filled where the packet says EL1 or EL2 in non-secure state.
	PC, Target uint64
	EL         uint8 // the PC's exception level
	// Virtual is the data address without its top-byte tag (the top byte
	// filled where bits 55:52 are all ones: a kernel address); Physical
	// is bits 55:0 of the physical one.
	Virtual, Physical         uint64
	Total, Issue, Translation uint16 // latencies, cycles
	Events                    uint64 // Ev* bits
	Class                     OpClass
	Op                        uint8  // the Operation Type payload
	Source                    uint16 // implementation defined (Neoverse: DataSource*)
	Context                   uint32 // CONTEXTIDR: the PID, where the kernel puts it there
	Timestamp                 uint64 // the generic timer's count
}

// Store says the operation wrote memory (a store, or an atomic's write).
func (r *Record) Store() bool { return r.Class == OpLoadStore && r.Op&1 != 0 }

// Load says the operation read memory and did not write it.
func (r *Record) Load() bool { return r.Class == OpLoadStore && r.Op&1 == 0 }

// Data sources in the encoding Arm's Neoverse and Cortex cores share (perf
// picks it by the CPU's MIDR; AmpereOne and HiSilicon cores encode theirs
// otherwise): the Data Source packet's values are implementation defined.
const (
	SourceL1D          = 0x0
	SourceL2           = 0x8
	SourcePeerCore     = 0x9
	SourceLocalCluster = 0xa
	SourceSystemCache  = 0xb
	SourcePeerCluster  = 0xc
	SourceRemote       = 0xd
	SourceDRAM         = 0xe
)

// address is an address packet's payload as an address.
func address(index uint8, v uint64) uint64 {
	a := v & (1<<56 - 1)
	switch index {
	case AddrPC, AddrTarget, AddrPrevBranch:
		ns, el := v>>63, v>>61&3
		if ns == 1 && (el == 1 || el == 2) {
			a |= 0xff << 56
		}
	case AddrVirtual:
		if a>>52&0xf == 0xf {
			a |= 0xff << 56
		}
	}
	return a
}

func (r *Record) add(p Packet) {
	switch p.Kind {
	case Address:
		a := address(p.Index, p.Payload)
		switch p.Index {
		case AddrPC:
			r.PC, r.EL, r.Has = a, uint8(p.Payload>>61&3), r.Has|HasPC
		case AddrTarget:
			r.Target, r.Has = a, r.Has|HasTarget
		case AddrVirtual:
			r.Virtual, r.Has = a, r.Has|HasVirtual
		case AddrPhysical:
			r.Physical, r.Has = a, r.Has|HasPhysical
		}
	case Counter:
		switch p.Index {
		case CountTotal:
			r.Total, r.Has = uint16(p.Payload), r.Has|HasTotal
		case CountIssue:
			r.Issue, r.Has = uint16(p.Payload), r.Has|HasIssue
		case CountTranslation:
			r.Translation, r.Has = uint16(p.Payload), r.Has|HasTranslation
		}
	case Events:
		r.Events, r.Has = p.Payload, r.Has|HasEvents
	case OpType:
		r.Class, r.Op, r.Has = OpClass(p.Index), uint8(p.Payload), r.Has|HasOp
	case DataSource:
		r.Source, r.Has = uint16(p.Payload), r.Has|HasSource
	case Context:
		r.Context, r.Has = uint32(p.Payload), r.Has|HasContext
	case Timestamp:
		r.Timestamp, r.Has = p.Payload, r.Has|HasTimestamp
	}
}

// Records decodes b's records in order and calls fn with each (the same
// Record each time: copy it to keep it). It returns how many bytes the
// whole records took: a record cut off at the buffer's end is left for
// the caller to decode again with the bytes that follow. A header that
// names no packet ends the decoding with a *HeaderError; the records
// before it were delivered.
func Records(b []byte, fn func(*Record)) (int, error) {
	var r Record
	done := 0
	for off := 0; off < len(b); {
		p, n, err := Next(b, off)
		if err == ErrShort {
			return done, nil
		}
		if err != nil {
			return done, err
		}
		off += n
		switch p.Kind {
		case Pad:
			if r.Has == 0 { // padding between records is theirs
				done = off
			}
			continue
		case End, Timestamp:
			r.add(p)
			if r.Has != 0 { // an End alone ends nothing
				fn(&r)
			}
			r, done = Record{}, off
			continue
		}
		r.add(p)
	}
	return done, nil
}
