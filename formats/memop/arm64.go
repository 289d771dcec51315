package memop

import (
	"encoding/binary"
	"strconv"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
)

// perf's arm64 register numbers (arch/arm64/include/uapi/asm/perf_regs.h):
// x0 … x30 are 0 … 30, then sp and pc.
const (
	ARM64SP = 31
	ARM64PC = 32
)

// ARM64RegsMask is x0 … x30, sp and pc.
const ARM64RegsMask = 1<<33 - 1

// arm64Reg is the perf number of a general register (x or w) or sp.
func arm64Reg(a any) int8 {
	switch r := a.(type) {
	case arm64asm.Reg:
		switch {
		case r >= arm64asm.X0 && r < arm64asm.XZR:
			return int8(r - arm64asm.X0)
		case r >= arm64asm.W0 && r < arm64asm.WZR:
			return int8(r - arm64asm.W0)
		}
	case arm64asm.RegSP:
		if arm64asm.Reg(r) == arm64asm.SP {
			return ARM64SP
		}
		return arm64Reg(arm64asm.Reg(r))
	}
	return NoReg
}

// regBytes is the width of a data register: w 4, x 8, b/h/s/d/q 1–16.
func regBytes(a arm64asm.Arg) uint16 {
	r, ok := a.(arm64asm.Reg)
	if !ok {
		return 0
	}
	switch {
	case r >= arm64asm.W0 && r <= arm64asm.WZR:
		return 4
	case r >= arm64asm.X0 && r <= arm64asm.XZR:
		return 8
	case r >= arm64asm.B0 && r < arm64asm.H0:
		return 1
	case r >= arm64asm.H0 && r < arm64asm.S0:
		return 2
	case r >= arm64asm.S0 && r < arm64asm.D0:
		return 4
	case r >= arm64asm.D0 && r < arm64asm.Q0:
		return 8
	case r >= arm64asm.Q0 && r < arm64asm.V0:
		return 16
	}
	return 0
}

// DecodeARM64 decodes the arm64 instruction at the start of code and
// describes its memory operand.
func DecodeARM64(code []byte) Operand {
	in, err := arm64asm.Decode(code)
	if err != nil {
		if len(code) >= 4 {
			if o, ok := decodeLSE(binary.LittleEndian.Uint32(code)); ok {
				return o
			}
		}
		return Operand{Reason: Undecodable}
	}
	o := Operand{Len: 4, Base: NoReg, Index: NoReg, AddrBits: 64, PCFromStart: true}
	name := in.Op.String()
	pos := -1
	for i, a := range in.Args {
		if a == nil {
			break
		}
		switch m := a.(type) {
		case arm64asm.MemImmediate:
			pos = i
			o.Base = arm64Reg(m.Base)
			off, writeback := memImmediate(m)
			o.Disp = off
			if writeback && o.Base != NoReg {
				o.Writes |= 1 << o.Base // pre- and post-index update the base
			}
		case arm64asm.MemExtend:
			pos = i
			o.Base, o.Index = arm64Reg(m.Base), arm64Reg(m.Index)
			shift := uint8(0)
			if !m.ShiftMustBeZero {
				shift = m.Amount
			}
			o.Scale = 1 << shift
			switch strings.ToLower(m.Extend.String()) {
			case "uxtw":
				o.IndexExt = ExtUXTW
			case "sxtw":
				o.IndexExt = ExtSXTW
			}
		case arm64asm.PCRel:
			if isLoadStore(name) {
				pos = i
				o.PCRel, o.Disp = true, int64(m)
			}
		}
		if pos >= 0 {
			break
		}
	}
	if pos < 0 || strings.HasPrefix(name, "PRFM") || strings.HasPrefix(name, "PRFUM") {
		o.Reason = NoMemory
		return o
	}
	if o.Base == NoReg && !o.PCRel {
		o.Reason = Undecodable
		return o
	}
	// Registers before the operand are the data (one, or two for pairs):
	// loads and atomics write them, exclusive stores their status.
	for i := 0; i < pos; i++ {
		if r := arm64Reg(in.Args[i]); r != NoReg && r != ARM64SP {
			if !strings.HasPrefix(name, "ST") || exclusiveStore(name) && i == 0 || isLSE(name) {
				o.Writes |= 1 << r
			}
		}
	}
	o.Kind, o.Atomic, o.Width = arm64Kind(name, in.Args[:pos])
	if o.Width == 0 {
		o.Reason = Gather // vector structures (ld1 … st4): several registers of lanes
	}
	return o
}

// IndexExt extends an arm64 index register before it is shifted.
type IndexExt uint8

const (
	ExtNone IndexExt = iota
	ExtUXTW          // the low 32 bits, zero-extended
	ExtSXTW          // the low 32 bits, sign-extended
)

func isLoadStore(name string) bool {
	return strings.HasPrefix(name, "LD") || strings.HasPrefix(name, "ST") || strings.HasPrefix(name, "PRFM")
}

func exclusiveStore(name string) bool {
	return strings.HasPrefix(name, "STXR") || strings.HasPrefix(name, "STLXR") || strings.HasPrefix(name, "STXP") || strings.HasPrefix(name, "STLXP")
}

// memImmediate reads the offset of a base+immediate operand from its
// text, since arm64asm keeps it unexported: "[x1,#16]", "[x1,#-8]!",
// "[x1],#16" (post-index: the access is at the base), "[x1]".
func memImmediate(m arm64asm.MemImmediate) (off int64, writeback bool) {
	s := m.String()
	if strings.HasSuffix(s, "!") {
		writeback = true
	}
	if i := strings.Index(s, "],"); i >= 0 {
		return 0, true
	}
	if i := strings.Index(s, ",#"); i >= 0 {
		v := strings.TrimRight(s[i+2:], "]!")
		n, err := strconv.ParseInt(v, 0, 64)
		if err == nil {
			off = n
		}
	}
	return off, writeback
}

// arm64Kind classifies by mnemonic; the width comes from the size suffix
// (b, h, sw) or the first data register, doubled for pairs.
func arm64Kind(name string, data []arm64asm.Arg) (Kind, bool, uint16) {
	if hasPrefix(name, []string{"LD1", "LD2", "LD3", "LD4", "ST1", "ST2", "ST3", "ST4"}) {
		return 0, false, 0 // vector structures: lanes of several registers
	}
	var k Kind
	atomic := hasPrefix(name, []string{"LDAR", "STLR", "LDAPR"})
	switch {
	case hasPrefix(name, []string{"CAS", "SWP"}) || isLSE(name):
		k, atomic = RMW, true
	case hasPrefix(name, []string{"LDXR", "LDAXR", "LDXP", "LDAXP"}):
		k, atomic = Load, true
	case exclusiveStore(name):
		k, atomic = Store, true
		if len(data) > 1 {
			data = data[1:] // after the status register
		}
	case strings.HasPrefix(name, "LD"):
		k = Load
	case strings.HasPrefix(name, "ST"):
		k = Store
	}
	var width uint16
	switch {
	case strings.HasSuffix(name, "SW"):
		width = 4
	case strings.HasSuffix(name, "B"):
		width = 1
	case strings.HasSuffix(name, "H"):
		width = 2
	case len(data) > 0:
		width = regBytes(data[0])
		if hasPrefix(name, []string{"CAS", "SWP"}) || isLSE(name) {
			width = regBytes(data[len(data)-1])
		}
	}
	if hasPrefix(name, []string{"LDP", "STP", "LDNP", "STNP", "LDXP", "STXP", "LDAXP", "STLXP", "CASP"}) {
		width *= 2
	}
	return k, atomic, width
}

// isLSE are the atomic memory operations (Armv8.1): ldadd, ldclr, ldeor,
// ldset, ldsmax, ldsmin, ldumax, ldumin and their st- aliases.
func isLSE(name string) bool {
	for _, p := range []string{"LDADD", "LDCLR", "LDEOR", "LDSET", "LDSMAX", "LDSMIN", "LDUMAX", "LDUMIN",
		"STADD", "STCLR", "STEOR", "STSET", "STSMAX", "STSMIN", "STUMAX", "STUMIN"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// decodeLSE decodes the Armv8.1 atomics, which golang.org/x/arch's
// arm64asm (v0.32) does not know, yet compilers emit for every atomic on
// current Arm servers (GOARM64=v8.1, -march=armv8.1-a, libgcc's outline
// atomics): the atomic memory operations (ldadd … ldumin, swp; Arm ARM
// C4.1.94), cas and casp. Only the fields the sampler needs are read.
func decodeLSE(enc uint32) (Operand, bool) {
	o := Operand{Len: 4, Index: NoReg, AddrBits: 64, Kind: RMW, Atomic: true}
	rs, rn, rt := int8(enc>>16&31), int8(enc>>5&31), int8(enc&31)
	o.Base = rn // 31 is sp here
	write := func(r int8) {
		if r != 31 {
			o.Writes |= 1 << r
		}
	}
	switch {
	case enc&0x3f200c00 == 0x38200000: // size 111 0 00 A R 1 Rs o3 opc 00 Rn Rt
		if o3, opc := enc>>15&1, enc>>12&7; o3 == 1 && opc != 0 {
			return o, false // ldapr and relatives: not an atomic update
		}
		o.Width = 1 << (enc >> 30)
		write(rt)
	case enc&0x3fa07c00 == 0x08a07c00: // cas: size 001000 1 L 1 Rs o0 11111 Rn Rt
		o.Width = 1 << (enc >> 30)
		write(rs)
	case enc&0xbfa07c00 == 0x08207c00: // casp: 0 sz 001000 0 L 1 Rs o0 11111 Rn Rt
		o.Width = 2 * (4 << (enc >> 30 & 1))
		write(rs)
		write(rs + 1)
	default:
		return o, false
	}
	return o, true
}
