package memop

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// oracleBinaries are real x86-64 code on every Debian/Ubuntu machine: the C
// library, the Go toolchain, and a few programs.
func oracleBinaries(t testing.TB) []string {
	var out []string
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/ls", "/usr/bin/bash"} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	if gofmt := filepath.Join(runtime.GOROOT(), "bin", "gofmt"); fileExists(gofmt) {
		out = append(out, gofmt)
	}
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// The decoder's memory operand (base, index, scale, displacement, width)
// and its load/store classification agree with GNU objdump's disassembly
// of whole binaries for at least 99.9% of the instructions that have one.
func TestAgreesWithObjdump(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the binaries on this machine must be x86-64")
	testenv.RequireTool(t, "objdump")
	bins := oracleBinaries(t)
	if len(bins) < 3 {
		t.Fatalf("want at least three x86-64 binaries to disassemble, found %v", bins)
	}
	var total, agree int
	seen := map[string]bool{}
	bad := map[string]int{}
	example := map[string]string{}
	for _, bin := range bins {
		if real, err := filepath.EvalSymlinks(bin); err == nil {
			if seen[real] {
				continue
			}
			seen[real] = true
		}
		n, ok := compareBinary(t, bin, func(mn, why string) {
			bad[mn]++
			if example[mn] == "" {
				example[mn] = why
			}
		})
		total += n
		agree += ok
		t.Logf("%s: %d of %d memory instructions agree", bin, ok, n)
	}
	if total < 100000 {
		t.Fatalf("only %d memory instructions compared", total)
	}
	rate := float64(agree) / float64(total)
	t.Logf("agreement %.5f over %d instructions", rate, total)
	var mns []string
	for mn := range bad {
		mns = append(mns, mn)
	}
	sort.Slice(mns, func(i, j int) bool { return bad[mns[i]] > bad[mns[j]] })
	for _, mn := range mns {
		t.Logf("disagree %-12s %6d  e.g. %s", mn, bad[mn], example[mn])
	}
	if rate < 0.999 {
		t.Errorf("agreement %.5f < 0.999", rate)
	}
}

var (
	insnLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t(.*)$`)
	ptrWidth = map[string]uint16{"BYTE": 1, "WORD": 2, "DWORD": 4, "QWORD": 8, "FWORD": 6, "TBYTE": 10,
		"XMMWORD": 16, "YMMWORD": 32, "ZMMWORD": 64}
	// oracleReadOnly are GNU mnemonics that only read a memory destination
	// (Intel SDM: compares, tests, pushes, indirect branches, x87 loads and
	// arithmetic, one-operand multiplies and divides).
	oracleReadOnly = regexp.MustCompile(`^(cmp|test|bt|push|call|jmp|ljmp|lcall|mul|imul|div|idiv|v?ptest|fi?ld|fbld|fldcw|fldenv|fi?comp?|fucomp?|fi?(add|sub|subr|mul|div|divr)|fx?rstor(64)?|xrstors?(64)?|v?ldmxcsr|v?u?comis[sd]|verw|verr)$`)
	oracleRMW      = regexp.MustCompile(`^(xchg|xadd|cmpxchg)`)
	oracleSkip     = regexp.MustCompile(`^(lea|nop|prefetch|clflush|clwb|cldemote|invlpg|bnd|(rep |repz |repnz )?(movs|stos|lods|cmps|scas|ins|outs))`)
)

// compareBinary disassembles bin's executable sections with objdump and
// checks each instruction with a memory operand against DecodeAMD64 of the
// same bytes; it returns how many it compared and how many agreed.
func compareBinary(t *testing.T, bin string, disagree func(mnemonic, why string)) (total, agree int) {
	bytesAt := sectionBytes(t, bin)
	cmd := exec.Command("objdump", "-d", "-M", "intel", "--no-show-raw-insn", "-w", bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := insnLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		addr, _ := strconv.ParseUint(m[1], 16, 64)
		text := m[2]
		if i := strings.Index(text, "#"); i >= 0 {
			text = text[:i]
		}
		text = strings.TrimSpace(text)
		want, ok := parseObjdump(text)
		if !ok {
			continue
		}
		code := bytesAt(addr)
		if code == nil {
			continue
		}
		total++
		got := DecodeAMD64(code[:min(len(code), 15)])
		if why := want.disagrees(&got); why != "" {
			disagree(want.mnemonic, fmt.Sprintf("%#x %q: %s", addr, text, why))
			continue
		}
		agree++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("objdump %s: %v", bin, err)
	}
	return total, agree
}

// sectionBytes reads bin's executable sections and returns the bytes from
// an address to its section's end (nil outside them).
func sectionBytes(t testing.TB, bin string) func(addr uint64) []byte {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type sect struct {
		addr uint64
		data []byte
	}
	var sects []sect
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type == elf.SHT_PROGBITS {
			d, err := s.Data()
			if err != nil {
				t.Fatal(err)
			}
			sects = append(sects, sect{s.Addr, d})
		}
	}
	return func(a uint64) []byte {
		for _, s := range sects {
			if a >= s.addr && a < s.addr+uint64(len(s.data)) {
				return s.data[a-s.addr:]
			}
		}
		return nil
	}
}

// objdumpOperand is what objdump's Intel syntax says of a memory operand.
type objdumpOperand struct {
	mnemonic     string
	first        bool // the operand is the first (the destination)
	segment      bool // fs: or gs:
	gather       bool // a vector index
	base, index  int8
	scale        uint8
	disp         int64
	width        uint16 // 0 where objdump names none (or a broadcast element)
	pcrel        bool
	abs          bool // a bare displacement, no registers
	addr32       bool
	operandCount int
}

var oracleRegs = map[string]int8{}

func init() {
	names := [][]string{{"rax", "eax"}, {"rbx", "ebx"}, {"rcx", "ecx"}, {"rdx", "edx"}, {"rsi", "esi"}, {"rdi", "edi"}, {"rbp", "ebp"}, {"rsp", "esp"}}
	for i, n := range names {
		oracleRegs[n[0]], oracleRegs[n[1]] = int8(i), int8(i)
	}
	for i := 8; i < 16; i++ {
		oracleRegs[fmt.Sprintf("r%d", i)] = int8(AMD64R8 + i - 8)
		oracleRegs[fmt.Sprintf("r%dd", i)] = int8(AMD64R8 + i - 8)
	}
	oracleRegs["riz"], oracleRegs["eiz"] = NoReg, NoReg
}

// parseObjdump reads an instruction line; ok is false when it has no
// memory operand to compare.
func parseObjdump(text string) (objdumpOperand, bool) {
	fields := strings.Fields(text)
	var o objdumpOperand
	// Prefixes (lock, rep, notrack, data16, cs, ds, bnd …) come first.
	i := 0
	for i < len(fields)-1 && prefixRe.MatchString(fields[i]) {
		i++
	}
	if i >= len(fields) {
		return o, false
	}
	o.mnemonic = fields[i]
	if oracleSkip.MatchString(strings.Join(fields, " ")) || oracleSkip.MatchString(o.mnemonic) {
		return o, false
	}
	ops := splitOperands(strings.Join(fields[i+1:], " "))
	o.operandCount = len(ops)
	for k, op := range ops {
		if !strings.Contains(op, "[") && !absRe.MatchString(op) {
			continue
		}
		o.first = k == 0
		return o, o.parseMem(op)
	}
	return o, false
}

func splitOperands(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

var (
	prefixRe = regexp.MustCompile(`^(lock|rep|repz|repnz|repe|repne|notrack|data16|addr32|cs|ds|es|ss|fs|gs|bnd|xacquire|xrelease|rex(\.\w+)?)$`)
	absRe    = regexp.MustCompile(`^(\w+ PTR )?[fgcdes]s:0x[0-9a-f]+$`)
)

var memRe = regexp.MustCompile(`^(?:(\w+) (?:PTR|BCST) )?(?:([a-z]s):)?(?:\[([^\]]*)\]|(0x[0-9a-f]+))`)

func (o *objdumpOperand) parseMem(op string) bool {
	m := memRe.FindStringSubmatch(op)
	if m == nil {
		return false
	}
	if !strings.Contains(op, "BCST") {
		o.width = ptrWidth[m[1]]
	}
	if m[2] == "fs" || m[2] == "gs" {
		o.segment = true
		return true
	}
	o.base, o.index = NoReg, NoReg
	if m[4] != "" {
		v, _ := strconv.ParseUint(m[4][2:], 16, 64)
		o.disp, o.abs = int64(v), true
		return true
	}
	expr := m[3]
	// Terms joined by + and -: registers, reg*scale, and hex displacements.
	for expr != "" {
		sign := int64(1)
		if expr[0] == '+' || expr[0] == '-' {
			if expr[0] == '-' {
				sign = -1
			}
			expr = expr[1:]
		}
		j := strings.IndexAny(expr, "+-")
		term := expr
		if j >= 0 {
			term, expr = expr[:j], expr[j:]
		} else {
			expr = ""
		}
		switch {
		case strings.HasPrefix(term, "0x"):
			v, err := strconv.ParseUint(term[2:], 16, 64)
			if err != nil {
				return false
			}
			o.disp += sign * int64(v)
		case strings.Contains(term, "*"):
			r, s, _ := strings.Cut(term, "*")
			if strings.HasPrefix(r, "xmm") || strings.HasPrefix(r, "ymm") || strings.HasPrefix(r, "zmm") {
				o.gather = true
				return true
			}
			reg, ok := oracleRegs[r]
			if !ok {
				return false
			}
			sc, _ := strconv.Atoi(s)
			o.index, o.scale = reg, uint8(sc)
			o.addr32 = o.addr32 || strings.HasPrefix(r, "e")
		case term == "rip":
			o.pcrel = true
		default:
			reg, ok := oracleRegs[term]
			if !ok {
				return false
			}
			o.base = reg
			o.addr32 = o.addr32 || strings.HasPrefix(term, "e")
		}
	}
	return true
}

// disagrees names the first field where the decoder differs, or "".
func (w *objdumpOperand) disagrees(g *Operand) string {
	switch {
	case w.segment:
		if g.Reason != Segment {
			return "objdump: segment-relative; decoder: " + g.Reason.String()
		}
		return ""
	case w.gather:
		if g.Reason != Gather {
			return "objdump: vector index; decoder: " + g.Reason.String()
		}
		return ""
	case g.Reason != Resolved:
		return "decoder: " + g.Reason.String()
	}
	if g.PCRel != w.pcrel || (!w.pcrel && g.Base != w.base) || g.Index != w.index || (w.index != NoReg && g.Scale != w.scale) {
		return fmt.Sprintf("decoder: base %d index %d scale %d pcrel %v", g.Base, g.Index, g.Scale, g.PCRel)
	}
	if g.Disp != w.disp && uint32(g.Disp) != uint32(w.disp) {
		return fmt.Sprintf("decoder: displacement %#x", g.Disp)
	}
	if w.width != 0 && g.Width != w.width {
		return fmt.Sprintf("decoder: width %d, objdump %d", g.Width, w.width)
	}
	if (g.AddrBits == 32) != w.addr32 {
		return fmt.Sprintf("decoder: %d-bit address", g.AddrBits)
	}
	// The classification: a memory destination is written unless the
	// mnemonic only reads it; a memory source is read.
	wantStore := w.first && w.operandCount > 0 && !oracleReadOnly.MatchString(w.mnemonic) || oracleRMW.MatchString(w.mnemonic)
	wantLoad := !w.first || oracleRMW.MatchString(w.mnemonic) || oracleReadOnly.MatchString(w.mnemonic)
	if (g.Kind&Store != 0) != wantStore {
		return fmt.Sprintf("decoder: %v, objdump's operand order says store=%v", g.Kind, wantStore)
	}
	if !wantStore && (g.Kind&Load != 0) != wantLoad {
		return fmt.Sprintf("decoder: %v, objdump's operand order says load=%v", g.Kind, wantLoad)
	}
	return ""
}
