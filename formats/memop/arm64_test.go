package memop

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
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

// Encodings from llvm-mc; expectations by hand from the Arm ARM.
func TestDecodeARM64(t *testing.T) {
	var regs Regs
	regs[0], regs[1], regs[2], regs[ARM64SP] = 0x1000, 0x2000, 3, 0x7ff0
	regs[3] = 0xffffffff // w3 = -1 sign-extended
	const pc = 0x400000
	for _, c := range []struct {
		asm    string
		enc    uint32
		reason Reason
		kind   Kind
		atomic bool
		width  uint16
		addr   uint64
	}{
		{"ldr x0, [x1, #16]", 0xf9400820, Resolved, Load, false, 8, 0x2010},
		{"str w0, [sp, #-16]!", 0xb81f0fe0, Resolved, Store, false, 4, 0x7fe0},
		{"ldr x30, [sp], #32", 0xf84207fe, Resolved, Load, false, 8, 0x7ff0},
		{"ldrb w0, [x1, x2]", 0x38626820, Resolved, Load, false, 1, 0x2003},
		{"ldr x0, [x1, x2, lsl #3]", 0xf8627820, Resolved, Load, false, 8, 0x2018},
		{"ldr w0, [x1, w3, sxtw #2]", 0xb863d820, Resolved, Load, false, 4, 0x2000 - 4},
		{"stp x0, x1, [sp, #16]", 0xa90107e0, Resolved, Store, false, 16, 0x8000},
		{"ldaxr x0, [x1]", 0xc85ffc20, Resolved, Load, true, 8, 0x2000},
		{"stlxr w2, x0, [x1]", 0xc802fc20, Resolved, Store, true, 8, 0x2000},
		{"ldaddal x2, x0, [x1]", 0xf8e20020, Resolved, RMW, true, 8, 0x2000},
		{"casal w2, w0, [x1]", 0x88e2fc20, Resolved, RMW, true, 4, 0x2000},
		{"swpl x3, x4, [sp]", 0xf86383e4, Resolved, RMW, true, 8, 0x7ff0},
		{"staddl w5, [x1]", 0xb865003f, Resolved, RMW, true, 4, 0x2000},
		{"ldsetab w1, w2, [x0]", 0x38a13002, Resolved, RMW, true, 1, 0x1000},
		{"caspal x0, x1, x2, x3, [x1]", 0x4860fc22, Resolved, RMW, true, 16, 0x2000},
		{"ldr x0, #8 (literal)", 0x58000040, Resolved, Load, false, 8, pc + 8},
		{"add x0, x1, x2", 0x8b020020, NoMemory, 0, false, 0, 0},
		{"prfm pldl1keep, [x1]", 0xf9800020, NoMemory, 0, false, 0, 0},
		{"ld1 {v0.16b}, [x1]", 0x4c407020, Gather, 0, false, 0, 0},
	} {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], c.enc)
		o := DecodeARM64(b[:])
		if o.Reason != c.reason {
			t.Errorf("%s: reason %v, want %v", c.asm, o.Reason, c.reason)
			continue
		}
		if c.reason != Resolved {
			continue
		}
		if o.Kind != c.kind || o.Atomic != c.atomic || o.Width != c.width {
			t.Errorf("%s: kind %v atomic %v width %d, want %v %v %d", c.asm, o.Kind, o.Atomic, o.Width, c.kind, c.atomic, c.width)
		}
		if a := o.Address(&regs, pc); a != c.addr {
			t.Errorf("%s: address %#x, want %#x", c.asm, a, c.addr)
		}
	}
}

// The arm64 decoder agrees with LLVM's disassembler (an implementation
// independent of golang.org/x/arch) on the Go toolchain's gofmt built for
// arm64, with and without the Armv8.1 atomics, for at least 99.9% of the
// instructions with a memory operand.
func TestARM64AgreesWithLLVM(t *testing.T) {
	llvm := testenv.RequireTool(t, "llvm-objdump")
	var total, agree int
	bad := map[string]int{}
	example := map[string]string{}
	for _, v := range []string{"v8.0", "v8.1"} {
		bin := filepath.Join(t.TempDir(), "gofmt-"+v)
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "cmd/gofmt")
		cmd.Env = append(os.Environ(), "GOARCH=arm64", "GOOS=linux", "GOARM64="+v, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building gofmt for arm64 %s: %v\n%s", v, err, out)
		}
		n, ok := compareARM64(t, llvm, bin, func(mn, why string) {
			bad[mn]++
			if example[mn] == "" {
				example[mn] = why
			}
		})
		t.Logf("gofmt arm64 %s: %d of %d memory instructions agree", v, ok, n)
		total += n
		agree += ok
	}
	// The Armv8.1 atomics, which the decoder reads itself: every
	// operation, ordering and size, assembled by llvm-mc.
	n, ok := compareARM64(t, llvm, lseObject(t), func(mn, why string) {
		bad[mn]++
		if example[mn] == "" {
			example[mn] = why
		}
	})
	t.Logf("Armv8.1 atomics: %d of %d agree", ok, n)
	if n < 500 {
		t.Errorf("only %d atomics compared", n)
	}
	total += n
	agree += ok
	if total < 50000 {
		t.Fatalf("only %d memory instructions compared", total)
	}
	var mns []string
	for mn := range bad {
		mns = append(mns, mn)
	}
	sort.Slice(mns, func(i, j int) bool { return bad[mns[i]] > bad[mns[j]] })
	for _, mn := range mns {
		t.Logf("disagree %-10s %6d  e.g. %s", mn, bad[mn], example[mn])
	}
	if rate := float64(agree) / float64(total); rate < 0.999 {
		t.Errorf("agreement %.5f < 0.999", rate)
	}
}

var (
	lseRe    = regexp.MustCompile(`^(ld|st)(add|clr|eor|set|smax|smin|umax|umin)`)
	structRe = regexp.MustCompile(`^(ld|st)[1-4]`)
	stxrRe   = regexp.MustCompile(`^st(l)?xr`)
	pairRe   = regexp.MustCompile(`^(ldp|stp|ldnp|stnp|ldxp|stxp|ldaxp|stlxp|casp)`)
	llvmLine = regexp.MustCompile(`^\s*([0-9a-f]+):\s+(\S+)\s+(.*)$`)
	llvmMem  = regexp.MustCompile(`\[([a-z0-9]+)(?:, ([a-z0-9]+)(?:, (lsl|uxtw|sxtw|sxtx|uxtx)(?: #(\d+))?)?)?(?:, #(-?(?:0x)?[0-9a-f]+))?\](!)?(?:, #(-?(?:0x)?[0-9a-f]+))?`)
)

func compareARM64(t *testing.T, llvm, bin string, disagree func(mn, why string)) (total, agree int) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(llvm, "-d", "--mattr=+lse", "--no-show-raw-insn", "--section=.text", bin)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var regs Regs
	for i := range 31 {
		// Distinct, so a wrong register shows; bit 31 set, so a wrong
		// 32-bit extension shows.
		regs[i] = uint64(i+1)<<36 | uint64(i+1)<<20 | 1<<31
	}
	regs[ARM64SP] = 0x7000000
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		m := llvmLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		addr, _ := strconv.ParseUint(m[1], 16, 64)
		mn, ops := m[2], m[3]
		if i := strings.Index(ops, "//"); i >= 0 {
			ops = ops[:i]
		}
		want, ok := llvmOperand(mn, ops, addr, &regs)
		if !ok || addr < text.Addr || addr+4 > text.Addr+uint64(len(data)) {
			continue
		}
		total++
		got := DecodeARM64(data[addr-text.Addr:])
		switch {
		case want.gather:
			if got.Reason == Gather {
				agree++
			} else {
				disagree(mn, fmt.Sprintf("%#x %s %s: decoder %v", addr, mn, ops, got.Reason))
			}
			continue
		case got.Reason != Resolved:
			disagree(mn, fmt.Sprintf("%#x %s %s: decoder %v", addr, mn, ops, got.Reason))
			continue
		}
		ga := got.Address(&regs, addr)
		if ga != want.addr || (want.width != 0 && got.Width != want.width) || (got.Kind&Store != 0) != want.store || (got.Kind&Load != 0) != want.load {
			disagree(mn, fmt.Sprintf("%#x %s %s: decoder addr %#x width %d %v; llvm addr %#x width %d store %v load %v",
				addr, mn, ops, ga, got.Width, got.Kind, want.addr, want.width, want.store, want.load))
			continue
		}
		agree++
	}
	cmd.Wait()
	return total, agree
}

type llvmWant struct {
	addr        uint64
	width       uint16
	store, load bool
	gather      bool
}

// llvmOperand computes, from LLVM's text alone, the address (on regs) and
// width of a memory instruction.
func llvmOperand(mn, ops string, pc uint64, regs *Regs) (llvmWant, bool) {
	if !strings.HasPrefix(mn, "ld") && !strings.HasPrefix(mn, "st") && !strings.HasPrefix(mn, "cas") && !strings.HasPrefix(mn, "swp") {
		return llvmWant{}, false
	}
	var w llvmWant
	lse := lseRe.MatchString(mn)
	switch {
	case strings.HasPrefix(mn, "cas") || strings.HasPrefix(mn, "swp") || lse:
		w.store, w.load = true, true
	case strings.HasPrefix(mn, "ld"):
		w.load = true
	default:
		w.store = true
	}
	if structRe.MatchString(mn) {
		w.gather = true
		return w, true
	}
	mem := llvmMem.FindStringSubmatchIndex(ops)
	reg := func(s string) uint64 {
		if s == "sp" || s == "wsp" {
			return regs[ARM64SP]
		}
		if s == "xzr" || s == "wzr" {
			return 0
		}
		n, _ := strconv.Atoi(s[1:])
		return regs[n]
	}
	if mem == nil { // a literal: "ldr x0, 0x1234 <sym>"
		f := strings.Fields(strings.ReplaceAll(ops, ",", " "))
		if len(f) < 2 || !strings.HasPrefix(f[1], "0x") {
			return w, false
		}
		w.addr, _ = strconv.ParseUint(f[1][2:], 16, 64)
	} else {
		g := func(i int) string {
			if mem[2*i] < 0 {
				return ""
			}
			return ops[mem[2*i]:mem[2*i+1]]
		}
		w.addr = reg(g(1))
		if idx := g(2); idx != "" {
			x := reg(idx)
			switch g(3) {
			case "uxtw":
				x = uint64(uint32(x))
			case "sxtw":
				x = uint64(int64(int32(x)))
			}
			sh, _ := strconv.Atoi(g(4))
			w.addr += x << sh
		}
		if off := g(5); off != "" {
			v, _ := strconv.ParseInt(off, 0, 64)
			w.addr += uint64(v)
		}
	}
	// Width: the size suffix, else the first data register.
	data := strings.Split(strings.TrimSpace(ops), ",")
	first := strings.TrimSpace(data[0])
	if stxrRe.MatchString(mn) && len(data) > 1 {
		first = strings.TrimSpace(data[1])
	}
	if (strings.HasPrefix(mn, "cas") || strings.HasPrefix(mn, "swp") || lse) && len(data) > 1 && strings.Contains(ops, "[") {
		first = strings.TrimSpace(data[strings.Count(ops[:strings.Index(ops, "[")], ",")-1])
	}
	switch {
	case strings.HasSuffix(mn, "sw"):
		w.width = 4
	case strings.HasSuffix(mn, "b"):
		w.width = 1
	case strings.HasSuffix(mn, "h"):
		w.width = 2
	default:
		w.width = map[byte]uint16{'w': 4, 'x': 8, 'b': 1, 'h': 2, 's': 4, 'd': 8, 'q': 16}[first[0]]
	}
	if pairRe.MatchString(mn) {
		w.width *= 2
	}
	return w, true
}

// lseObject assembles every LSE atomic form with llvm-mc.
func lseObject(t *testing.T) string {
	mc := testenv.RequireTool(t, "llvm-mc")
	var src strings.Builder
	k := 0
	reg := func(x bool) string {
		k = (k*7 + 3) % 30
		if x {
			return fmt.Sprintf("x%d", k)
		}
		return fmt.Sprintf("w%d", k)
	}
	for _, op := range []string{"ldadd", "ldclr", "ldeor", "ldset", "ldsmax", "ldsmin", "ldumax", "ldumin", "swp", "cas"} {
		for _, ord := range []string{"", "a", "al", "l"} {
			for _, size := range []string{"b", "h", "w", "x"} {
				x := size == "x"
				suffix := size
				if size == "w" || size == "x" {
					suffix = ""
				}
				base := reg(true)
				if k%5 == 0 {
					base = "sp"
				}
				fmt.Fprintf(&src, "%s%s%s %s, %s, [%s]\n", op, ord, suffix, reg(x), reg(x), base)
				if op != "swp" && op != "cas" && (ord == "" || ord == "l") {
					fmt.Fprintf(&src, "st%s%s%s %s, [%s]\n", op[2:], ord, suffix, reg(x), base)
				}
			}
		}
	}
	for _, ord := range []string{"", "a", "al", "l"} {
		for _, x := range []bool{false, true} {
			r := "w"
			if x {
				r = "x"
			}
			for i := 0; i < 28; i += 6 {
				fmt.Fprintf(&src, "casp%s %s%d, %s%d, %s%d, %s%d, [x%d]\n", ord, r, i, r, i+1, r, i+2, r, i+3, (i+9)%30)
			}
		}
	}
	dir := t.TempDir()
	asm, obj := filepath.Join(dir, "lse.s"), filepath.Join(dir, "lse.o")
	// Repeat the forms with other registers, for a few hundred in all.
	text := strings.Repeat(src.String(), 3)
	if err := os.WriteFile(asm, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mc, "-triple=aarch64", "-mattr=+lse", "-filetype=obj", "-o", obj, asm).CombinedOutput(); err != nil {
		t.Fatalf("llvm-mc: %v\n%s", err, out)
	}
	return obj
}

// An arm64 watchpoint is taken before the access runs (the kernel steps
// over it after), so a trap's IP is the access itself, with its registers
// not yet updated by it; an x86 trap's is the instruction after it.
// Encodings from llvm-mc, addresses by hand.
func TestTrapARM64(t *testing.T) {
	var code []byte
	for _, enc := range []uint32{
		0x8b020020, // 0: add x0, x1, x2
		0xf8008420, // 4: str x0, [x1], #8 (post-indexed: stores at x1, then x1 += 8)
		0xf9400820, // 8: ldr x0, [x1, #16]
	} {
		code = binary.LittleEndian.AppendUint32(code, enc)
	}
	r, err := NewResolver(loopCode{code}, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	var regs Regs
	regs[1] = 0x2000
	if a, res := r.Trap(1, loopStart+4, &regs); res != Resolved || a.PC != loopStart+4 || a.Addr != 0x2000 || a.Kind != Store || a.Width != 8 {
		t.Errorf("trap at the post-indexed str: %+v %v, want its store of 8 bytes at 0x2000", a, res)
	}
	if a, res := r.Trap(1, loopStart+8, &regs); res != Resolved || a.PC != loopStart+8 || a.Addr != 0x2010 || a.Kind != Load {
		t.Errorf("trap at the ldr: %+v %v, want its load at 0x2010", a, res)
	}
	// The rule for x86 would take the instruction before: the add, no access.
	if _, res := r.Trap(1, loopStart, &regs); res != NoMemory {
		t.Errorf("trap at the add: %v, want %v", res, NoMemory)
	}
	if _, res := r.Trap(1, loopStart+4, nil); res != NoRegisters {
		t.Errorf("trap without registers: %v, want %v", res, NoRegisters)
	}
}
