package memop

import (
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// perf's x86 register numbers (arch/x86/include/uapi/asm/perf_regs.h).
const (
	AMD64AX = 0
	AMD64BX = 1
	AMD64CX = 2
	AMD64DX = 3
	AMD64SI = 4
	AMD64DI = 5
	AMD64BP = 6
	AMD64SP = 7
	AMD64IP = 8
	AMD64R8 = 16
)

// AMD64RegsMask is every general register perf dumps on x86-64: ax … ss
// (0–11) and r8 … r15 (16–23); the kernel refuses ds, es, fs and gs.
const AMD64RegsMask = 0xff0fff

// gpr64 maps x86asm's order within a size (a, c, d, b, sp, bp, si, di,
// r8 …) to perf's (ax, bx, cx, dx, si, di, bp, sp, …, r8 …).
var gpr64 = [16]int8{AMD64AX, AMD64CX, AMD64DX, AMD64BX, AMD64SP, AMD64BP, AMD64SI, AMD64DI,
	16, 17, 18, 19, 20, 21, 22, 23}

// perfReg is the perf number of a general register of any size, or NoReg.
func perfReg(r x86asm.Reg) int8 {
	switch {
	case r >= x86asm.AL && r <= x86asm.BL:
		return gpr64[r-x86asm.AL]
	case r >= x86asm.AH && r <= x86asm.BH:
		return gpr64[r-x86asm.AH]
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return gpr64[r-x86asm.SPB+4]
	case r >= x86asm.AX && r <= x86asm.R15W:
		return gpr64[r-x86asm.AX]
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return gpr64[r-x86asm.EAX]
	case r >= x86asm.RAX && r <= x86asm.R15:
		return gpr64[r-x86asm.RAX]
	case r == x86asm.RIP || r == x86asm.EIP:
		return AMD64IP
	}
	return NoReg
}

// DecodeAMD64 decodes the x86-64 instruction at the start of code and
// describes its explicit memory operand. Len is set whenever the bytes
// decode, whatever the reason.
func DecodeAMD64(code []byte) Operand {
	if o, ok := notInX86asm(code); ok {
		return o
	}
	in, err := x86asm.Decode(code, 64)
	if err != nil || in.Op == 0 { // truncated bytes decode to a bare prefix, Op 0
		if o, ok := lengthOnly(code); ok {
			return o
		}
		return Operand{Reason: Undecodable}
	}
	o := Operand{Len: uint8(in.Len), Base: NoReg, Index: NoReg, AddrBits: 64}
	pos := -1
	var mem x86asm.Mem
	for i, a := range in.Args {
		if a == nil {
			break
		}
		if m, ok := a.(x86asm.Mem); ok && pos < 0 {
			pos, mem = i, m
		}
	}
	c := classOf(in.Op)
	o.Writes = writesAMD64(&in, c)
	switch {
	case c.str:
		o.Reason = String
		return o
	case pos < 0 || c.noAccess:
		o.Reason = NoMemory
		if rel, ok := in.Args[0].(x86asm.Rel); ok && c.jump {
			o.Jump, o.Rel = true, int64(rel)
		}
		return o
	case mem.Segment == x86asm.FS || mem.Segment == x86asm.GS:
		o.Reason = Segment
		return o
	case mem.Index >= x86asm.X0:
		o.Reason = Gather
		return o
	}
	o.Base, o.Index, o.Scale, o.Disp = perfReg(mem.Base), perfReg(mem.Index), mem.Scale, mem.Disp
	if mem.Base == 0 && mem.Index == 0 && vexRIPRelative(&in, code) {
		o.Base = AMD64IP
	}
	if o.Base == AMD64IP {
		o.Base, o.PCRel = NoReg, true
	}
	if in.AddrSize == 32 {
		o.AddrBits = 32
	}
	o.Width = uint16(in.MemBytes)
	if o.Width == 0 && x87m80(&in, code) {
		o.Width = 10
	}
	o.Kind = c.kind(pos)
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if p&0xFF == x86asm.PrefixLOCK && p&(x86asm.PrefixIgnored|x86asm.PrefixInvalid) == 0 {
			o.Atomic = true
		}
	}
	if in.Op == x86asm.XCHG {
		o.Atomic = true
	}
	return o
}

// vexRIPRelative works around x86asm reporting a VEX or EVEX instruction's
// RIP-relative operand as a bare displacement: in 64-bit mode ModRM mod=00
// rm=101 is always RIP-relative (an absolute disp32 needs a SIB byte). The
// ModRM byte follows the prefixes (VEX/EVEX payload included) and the one
// opcode byte.
func vexRIPRelative(in *x86asm.Inst, code []byte) bool {
	n, vex := 0, false
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if p.IsVEX() || p.IsEVEX() {
			vex = true
		}
		n++
	}
	return vex && n+1 < len(code) && code[n+1]&0xC7 == 0x05
}

// x87m80 reports the x87 instructions on 80-bit memory, whose width x86asm
// leaves at zero: fld/fstp m80 (DB /5, /7), fbld/fbstp (DF /4, /6).
func x87m80(in *x86asm.Inst, code []byte) bool {
	n := 0
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		n++
	}
	if n+1 >= len(code) {
		return false
	}
	op, reg := code[n], code[n+1]>>3&7
	return op == 0xDB && (reg == 5 || reg == 7) || op == 0xDF && (reg == 4 || reg == 6)
}

// opClass is what the decoder needs to know of a mnemonic, worked out once
// per x86asm.Op from its name: matching names for each decoded instruction
// was a third of the cold path (BenchmarkResolveCold in formats/codemap).
type opClass struct {
	str      bool // a string instruction (stringOp)
	noAccess bool // its memory operand accesses no data (noAccess)
	jump     bool // J* or LOOP*: a direct jump when its operand is relative
	rmw      bool // reads and writes memory wherever the operand sits
	store    bool // only writes a memory destination (storePrefixes)
	readOnly bool // only reads a first memory operand (readOnlyDest, readOnlyPrefixes)
	// keepsDest: a register destination is not written (readOnlyDest, CMP*).
	keepsDest bool
}

// kind classifies by the operand's place: Intel order puts the
// destination first.
func (c opClass) kind(pos int) Kind {
	switch {
	case c.rmw:
		return RMW
	case pos > 0:
		return Load
	case c.store:
		return Store
	case c.readOnly:
		return Load
	}
	return RMW
}

// opClasses are the classes by x86asm.Op; read-only once built.
var opClasses = func() []opClass {
	var out []opClass
	for op, unnamed := x86asm.Op(0), 0; unnamed < 256; op++ { // past the last name
		name := op.String()
		if strings.HasPrefix(name, "Op(") {
			out = append(out, opClass{})
			unnamed++
			continue
		}
		unnamed = 0
		out = append(out, opClass{
			str:       stringOp(name),
			noAccess:  noAccess(name),
			jump:      name[0] == 'J' || strings.HasPrefix(name, "LOOP"),
			rmw:       rmwAlways[name],
			store:     hasPrefix(name, storePrefixes),
			readOnly:  readOnlyDest[name] || hasPrefix(name, readOnlyPrefixes),
			keepsDest: readOnlyDest[name] || strings.HasPrefix(name, "CMP"),
		})
	}
	return out
}()

func classOf(op x86asm.Op) opClass {
	if int(op) < len(opClasses) {
		return opClasses[op]
	}
	return opClass{}
}

func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// rmwAlways read and write memory wherever the operand sits.
var rmwAlways = map[string]bool{"XCHG": true, "XADD": true, "CMPXCHG": true, "CMPXCHG8B": true, "CMPXCHG16B": true}

// storePrefixes are mnemonics that only write a memory destination: moves,
// setcc, pops, x87 and SSE stores and state saves, extracts and
// down-converting or compressing AVX-512 stores.
var storePrefixes = []string{"MOV", "VMOV", "SET", "POP", "FST", "FIST", "FBSTP", "FNST", "FXSAVE", "XSAVE",
	"STMXCSR", "VSTMXCSR", "PEXTR", "VPEXTR", "EXTRACTPS", "VEXTRACT", "VCVTPS2PH", "VPMOV", "VCOMPRESS",
	"VPCOMPRESS", "VMASKMOV", "VPMASKMOV", "SGDT", "SIDT", "SLDT", "SMSW", "STR", "MASKMOV"}

// readOnlyDest only read a first memory operand: compares, tests, pushes,
// indirect branches, x87 loads and arithmetic, multiplies and divides
// (whose result goes to registers), and state loads.
var readOnlyDest = map[string]bool{"CMP": true, "TEST": true, "BT": true, "PUSH": true, "CALL": true, "JMP": true,
	"LCALL": true, "LJMP": true, "MUL": true, "IMUL": true, "DIV": true, "IDIV": true, "PTEST": true, "VPTEST": true,
	"BOUND": true, "VERR": true, "VERW": true, "LAR": true, "LSL": true, "LMSW": true, "LTR": true, "LLDT": true,
	"LGDT": true, "LIDT": true, "LDMXCSR": true, "VLDMXCSR": true}

var readOnlyPrefixes = []string{"FLD", "FILD", "FBLD", "FCOM", "FICOM", "FUCOM", "FADD", "FIADD", "FSUB", "FISUB",
	"FMUL", "FIMUL", "FDIV", "FIDIV", "FRSTOR", "FXRSTOR", "XRSTOR", "UCOMIS", "COMIS", "VUCOMIS", "VCOMIS"}

// noAccess are instructions with a memory operand that access no data:
// address arithmetic, hinting nops, prefetches and cache-line flushes.
func noAccess(name string) bool {
	return name == "LEA" || name == "NOP" || strings.HasPrefix(name, "PREFETCH") || strings.HasPrefix(name, "CLFLUSH") ||
		name == "CLWB" || name == "CLDEMOTE" || name == "INVLPG" || strings.HasPrefix(name, "BND")
}

// notInX86asm decodes the instructions without a memory operand whose length
// x86asm gets wrong (TestLengthsAgreeWithObjdump): endbr64 and endbr32 (CET:
// the first instruction of every function that Ubuntu's and Fedora's
// compilers emit) and rdpkru and wrpkru, which it does not know, and
// vzeroupper and vzeroall, which it reads a byte too long. The resolver
// decodes forward from a function's start, so each would hide the
// instruction before every IP after it.
func notInX86asm(code []byte) (Operand, bool) {
	o := Operand{Reason: NoMemory, Base: NoReg, Index: NoReg, AddrBits: 64}
	switch {
	case len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb):
		o.Len, o.Landing = 4, true
	case len(code) >= 3 && code[0] == 0x0f && code[1] == 0x01 && (code[2] == 0xee || code[2] == 0xef):
		o.Len = 3
		if code[2] == 0xee { // rdpkru writes edx:eax
			o.Writes = 1<<AMD64AX | 1<<AMD64DX
		}
	case len(code) >= 3 && code[0] == 0xc5 && code[2] == 0x77: // two-byte VEX, map 0F
		o.Len = 3
	case len(code) >= 4 && code[0] == 0xc4 && code[1]&0x1f == 1 && code[3] == 0x77: // three-byte VEX, map 0F
		o.Len = 4
	default:
		return shadowStackGroup(code)
	}
	return o, true
}

// shadowStackGroup decodes F3 0F AE /4, /5 and /6 (ptwrite, incssp,
// umonitor, clrssbsy), which x86asm takes for xsave, lfence or xsaveopt
// without their F3 prefix: a wrong kind for the memory forms.
func shadowStackGroup(code []byte) (Operand, bool) {
	p := 0
	for p < len(code) && code[p] == 0xf3 {
		p++
	}
	if p == 0 {
		return Operand{}, false
	}
	if p < len(code) && code[p]&0xf0 == 0x40 { // REX
		p++
	}
	if p+2 >= len(code) || code[p] != 0x0f || code[p+1] != 0xae {
		return Operand{}, false
	}
	if reg := code[p+2] >> 3 & 7; reg < 4 || reg > 6 {
		return Operand{}, false
	}
	return lengthOnly(code)
}

// lengthOnly measures the instructions of the opcode groups whose layout
// the SDM fixes for the whole group, for those x86asm does not know (CET's
// shadow-stack instructions, adcx and adox, rdpid, serialize, movdiri,
// gf2p8affineqb, …: TestLengthsAgreeWithObjdump): maps 0F38 (ModRM, no
// immediate) and 0F3A (ModRM, imm8), and the 0F groups 01, 0D, 18–1F, AE
// and C7 (ModRM). A register form (mod 3) accesses no data memory (at most
// the shadow stack or a monitored line); a memory form is Undecodable, but
// with its length, so that the forward scan goes on past it.
func lengthOnly(code []byte) (Operand, bool) {
	p := 0
	for p < len(code) && isLegacyPrefix(code[p]) {
		p++
	}
	if p < len(code) && code[p]&0xf0 == 0x40 { // REX
		p++
	}
	if p+1 >= len(code) || code[p] != 0x0f {
		return Operand{}, false
	}
	imm := 0
	switch op := code[p+1]; {
	case op == 0x38:
		p += 3
	case op == 0x3a:
		p, imm = p+3, 1
	case op == 0x01, op == 0x0d, op >= 0x18 && op <= 0x1f, op == 0xae, op == 0xc7:
		p += 2
	default:
		return Operand{}, false
	}
	if p >= len(code) {
		return Operand{}, false
	}
	modrm := code[p]
	p++
	mod, rm := modrm>>6, modrm&7
	o := Operand{Reason: Undecodable, Base: NoReg, Index: NoReg, AddrBits: 64}
	switch {
	case mod == 3:
		o.Reason = NoMemory
	case rm == 4: // SIB
		if p >= len(code) {
			return Operand{}, false
		}
		if mod == 0 && code[p]&7 == 5 {
			p += 4
		}
		p++
	case mod == 0 && rm == 5: // rip-relative
		p += 4
	}
	switch mod {
	case 1:
		p++
	case 2:
		p += 4
	}
	if p += imm; p > len(code) || p > MaxInsn {
		return Operand{}, false
	}
	o.Len = uint8(p)
	return o, true
}

func isLegacyPrefix(b byte) bool {
	switch b {
	case 0x66, 0x67, 0xf0, 0xf2, 0xf3, 0x2e, 0x36, 0x3e, 0x26, 0x64, 0x65:
		return true
	}
	return false
}

// stringOp are the string instructions, whose address is in rsi/rdi and
// moves as they repeat.
func stringOp(name string) bool {
	for _, p := range []string{"MOVS", "STOS", "LODS", "CMPS", "SCAS", "INS", "OUTS"} {
		if strings.HasPrefix(name, p) && len(name) == len(p)+1 && strings.ContainsRune("BWDQ", rune(name[len(p)])) {
			return true
		}
	}
	return false
}

// writesAMD64 are the general registers an instruction writes: a register
// destination, both operands of exchanges, and the implicit ones (the
// stack pointer of pushes, pops, calls and returns; rax/rdx of multiplies,
// divides and compare-exchanges; rsi/rdi/rcx of string instructions).
func writesAMD64(in *x86asm.Inst, c opClass) uint64 {
	var w uint64
	set := func(r int8) {
		if r != NoReg {
			w |= 1 << r
		}
	}
	if r, ok := in.Args[0].(x86asm.Reg); ok && !c.keepsDest {
		set(perfReg(r))
	}
	switch op := in.Op; op {
	case x86asm.XCHG, x86asm.XADD:
		if r, ok := in.Args[1].(x86asm.Reg); ok {
			set(perfReg(r))
		}
	case x86asm.CMPXCHG, x86asm.CMPXCHG8B, x86asm.CMPXCHG16B, x86asm.MUL, x86asm.IMUL, x86asm.DIV, x86asm.IDIV,
		x86asm.CPUID, x86asm.RDTSC, x86asm.RDTSCP, x86asm.CQO, x86asm.CDQ, x86asm.CWD:
		set(AMD64AX)
		set(AMD64DX)
		if op == x86asm.CPUID || op == x86asm.RDTSCP {
			set(AMD64BX)
			set(AMD64CX)
		}
	case x86asm.PUSH, x86asm.POP, x86asm.CALL, x86asm.RET, x86asm.LCALL, x86asm.LRET, x86asm.ENTER, x86asm.LEAVE,
		x86asm.PUSHF, x86asm.POPF, x86asm.PUSHFQ, x86asm.POPFQ:
		set(AMD64SP)
		if op == x86asm.LEAVE || op == x86asm.ENTER {
			set(AMD64BP)
		}
	case x86asm.SYSCALL:
		set(AMD64AX)
		set(AMD64CX)
		set(17) // r11
	}
	if c.str {
		set(AMD64SI)
		set(AMD64DI)
		set(AMD64CX)
		set(AMD64AX)
	}
	return w
}
