package memop

import (
	"bufio"
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

// cetSource is a program compiled with -fcf-protection, as Ubuntu and Fedora
// build theirs: every function starts with endbr64, and so do the targets of
// its computed gotos.
const cetSource = `
#include <stdlib.h>
static long counters[64];
__attribute__((noinline)) long add(long *p, long n) { return __atomic_add_fetch(p, n, __ATOMIC_SEQ_CST); }
__attribute__((noinline)) long dispatch(const unsigned char *ops, int n) {
	static void *labels[] = {&&inc, &&dec, &&end};
	long acc = 0;
	int i = 0;
	goto *labels[ops[i]];
inc:	acc += add(&counters[i & 63], 1); if (++i < n) goto *labels[ops[i]]; goto end;
dec:	acc -= counters[i & 63]; if (++i < n) goto *labels[ops[i]];
end:	return acc;
}
int main(int argc, char **argv) {
	unsigned char ops[4] = {0, 1, 0, 2};
	return (int)dispatch(ops, argc + 3) & 1;
}
`

// buildCET compiles cetSource with gcc -O2 -fcf-protection=full.
func buildCET(t *testing.T) string {
	return gccBuild(t, "cet.c", cetSource, "-O2", "-fcf-protection=full")
}

// gccBuild writes source to a file named file and builds it with gcc and
// args into a file beside it, whose path it returns.
func gccBuild(t *testing.T, file, source string, args ...string) string {
	t.Helper()
	gcc := testenv.RequireTool(t, "gcc")
	dir := t.TempDir()
	src, out := filepath.Join(dir, file), filepath.Join(dir, "out")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(gcc, append(args, "-o", out, src)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, msg)
	}
	return out
}

// newerSource holds instructions x86asm does not know (or reads without
// their F3 prefix), as GNU as assembles them: CET's shadow-stack
// instructions (in Ubuntu's C library), adcx and adox (bignum code),
// GFNI, rdpid, rdseed, serialize, the WAITPKG, MOVDIR and user-interrupt
// instructions, Key Locker, cldemote and prefetchwt1, in register and
// memory forms, with and without REX, SIB, displacements and immediates.
const newerSource = `
	.text
	rdsspq %rax
	rdsspd %ecx
	rdsspq %r12
	incsspq %r9
	incsspd %edx
	saveprevssp
	rstorssp 8(%rax)
	rstorssp (%r10,%r11,4)
	rstorssp 0x12345678(%rip)
	setssbsy
	clrssbsy (%rbx)
	clrssbsy -0x80(%rsp)
	wrssq %rax, (%rbx)
	wrssd %eax, 0x400(%rcx,%rdx,8)
	wrussq %r8, (%r9)
	wrussd %ecx, (%rdx)
	adcx %rax, %rbx
	adcx 0x10(%rsi), %r11
	adox (%rcx), %rdx
	adox %r8d, %r9d
	gf2p8affineqb $1, %xmm1, %xmm2
	gf2p8affineinvqb $2, 0x20(%rax,%rbx,2), %xmm3
	gf2p8mulb (%rdi), %xmm4
	rdpid %rax
	rdseed %ecx
	rdseed %r10
	serialize
	umonitor %rax
	umwait %ecx
	tpause %r8d
	movdiri %rax, (%rbx)
	movdiri %ecx, 0x7f(%rdx)
	movdir64b (%rax), %rbx
	enqcmd (%rax), %rbx
	enqcmds 0x40(%rsi), %rdi
	ptwrite %rax
	ptwrite 8(%rbp)
	hreset $0
	uiret
	testui
	clui
	stui
	aesenc128kl (%rax), %xmm1
	encodekey128 %eax, %ebx
	cldemote (%rax)
	cldemote 0x100(%r13)
	prefetchwt1 (%rax)
	pconfig
	nop
`

// buildNewer assembles newerSource with gcc into an object file.
func buildNewer(t *testing.T) string { return gccBuild(t, "newer.s", newerSource, "-c") }

var rawLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(.*)$`)

// The resolver finds the instruction before a sampled IP by decoding
// forward from its function's start, so a single wrong length loses every
// IP after it: each instruction's length agrees with GNU objdump's, over
// the C library, a few programs, a CET-built one, and, each without
// exception, the instructions of newerSource.
func TestLengthsAgreeWithObjdump(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the binaries on this machine must be x86-64")
	objdump := testenv.RequireTool(t, "objdump")
	newer := buildNewer(t)
	bins := append(oracleBinaries(t), buildCET(t), newer)
	var total, agree, endbr, newerTotal int
	bad := map[string]int{}
	example := map[string]string{}
	for _, bin := range bins {
		out, err := exec.Command(objdump, "-d", "-w", bin).Output()
		if err != nil {
			t.Fatalf("objdump %s: %v", bin, err)
		}
		bytesAt := sectionBytes(t, bin)
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			m := rawLine.FindStringSubmatch(sc.Text())
			if m == nil || strings.Contains(m[3], "(bad)") {
				continue
			}
			addr, _ := strconv.ParseUint(m[1], 16, 64)
			code := bytesAt(addr)
			if code == nil {
				continue
			}
			want := len(strings.Fields(m[2]))
			mn := strings.Fields(m[3] + " ?")[0]
			if mn == "endbr64" {
				endbr++
			}
			total++
			if bin == newer {
				newerTotal++
				mn = "newer:" + mn
			}
			if got := int(DecodeAMD64(code[:min(len(code), MaxInsn)]).Len); got != want {
				bad[mn]++
				example[mn] = m[1] + ": " + strings.TrimSpace(m[2]) + " " + m[3] + ": length " + strconv.Itoa(got)
				continue
			}
			agree++
		}
	}
	var mns []string
	for mn := range bad {
		mns = append(mns, mn)
	}
	sort.Slice(mns, func(i, j int) bool { return bad[mns[i]] > bad[mns[j]] })
	for _, mn := range mns {
		t.Logf("disagree %-10s %6d  e.g. %s", mn, bad[mn], example[mn])
	}
	t.Logf("%d of %d lengths agree; %d endbr64", agree, total, endbr)
	if total < 100000 || endbr < 3 {
		t.Fatalf("only %d instructions, %d endbr64, compared", total, endbr)
	}
	if want := strings.Count(newerSource, "\n\t") - 1; newerTotal != want {
		t.Errorf("objdump shows %d instructions of newerSource, want %d", newerTotal, want)
	}
	for mn, n := range bad {
		if strings.HasPrefix(mn, "newer:") {
			t.Errorf("%s: %d lengths disagree with objdump (%s)", mn, n, example[mn])
		}
	}
	if bad["endbr64"] > 0 || float64(agree) < 0.9999*float64(total) {
		t.Errorf("%d of %d lengths disagree with objdump (%d endbr64)", total-agree, total, bad["endbr64"])
	}
}

// endbr64 (objdump: f3 0f 1e fa) starts a function compiled with
// -fcf-protection and marks where indirect branches land: the resolver
// decodes past the first, and does not take the code before the second as
// what ran before it.
func TestEndbr(t *testing.T) {
	code := []byte{
		0xf3, 0x0f, 0x1e, 0xfa, // 0: endbr64
		0xf0, 0x48, 0x01, 0x37, // 4: lock add %rsi,(%rdi)
		0x89, 0xc0, // 8: mov %eax,%eax
		0xf0, 0x48, 0x01, 0x37, // 10: lock add %rsi,(%rdi)
		0xf3, 0x0f, 0x1e, 0xfa, // 14: endbr64, a computed goto's target
		0xc3, // 18: ret
	}
	const start = loopStart
	r, _ := NewResolver(loopCode{code}, "amd64")
	var regs Regs
	regs[AMD64DI] = 0x600680
	if a, res := r.Resolve(1, start+8, &regs); res != Resolved || a.Addr != 0x600680 || a.PC != start+4 || !a.Atomic {
		t.Errorf("after the first lock add: %+v %v, want the lock add at %#x on 0x600680", a, res, start+4)
	}
	if a, res := r.Resolve(1, start+14, &regs); res != Ambiguous {
		t.Errorf("at the landing after the second lock add: %+v %v, want %v", a, res, Ambiguous)
	}
	// A watchpoint's trap (Before) likewise: after the first lock add it is
	// that add; at the landing, the add or an indirect jump's read.
	if a, res := r.Before(1, start+8, &regs); res != Resolved || a.PC != start+4 {
		t.Errorf("trap after the first lock add: %+v %v", a, res)
	}
	if a, res := r.Before(1, start+14, &regs); res != Ambiguous {
		t.Errorf("trap at the landing: %+v %v, want %v", a, res, Ambiguous)
	}
	// On x86 a trap is resolved as Before.
	if a, res := r.Trap(1, start+8, &regs); res != Resolved || a.PC != start+4 {
		t.Errorf("x86 trap after the first lock add: %+v %v", a, res)
	}
}
