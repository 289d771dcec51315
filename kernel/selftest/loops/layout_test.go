package loops

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// branch is a branch of a loop's layout: its condition and whether it
// jumps forward (over an if's body) or back (the loop).
type branch struct {
	cond    string // lt, ge, le, ne, always
	forward bool
}

// layouts are the branch layouts the expectations of Branch1…7 and
// InstrLoop depend on (loops.go): an if jumps forward over its body when
// its condition is false, the loop jumps back while temp < size.
var layouts = map[string][]branch{
	"InstrLoop": {{"ne", false}},
	"Branch1":   {{"ge", true}, {"lt", false}},
	"Branch2":   {{"ge", true}, {"lt", false}},
	"Branch3":   {{"le", true}, {"lt", false}},
	"Branch4":   {{"ne", true}, {"lt", false}},
	"Branch5":   {{"ne", true}, {"lt", false}},
	"Branch6":   {{"ge", true}, {"always", true}, {"lt", false}},
	"Branch7":   {{"lt", false}},
}

// mnemonics name the conditions as `go tool objdump` prints them.
var mnemonics = map[string]map[string]string{
	"amd64": {"JB": "lt", "JAE": "ge", "JBE": "le", "JNE": "ne", "JMP": "always"},
	"arm64": {"BLO": "lt", "BCC": "lt", "BHS": "ge", "BCS": "ge", "BLS": "le", "BNE": "ne", "JMP": "always", "B": "always"},
}

// TestLayout disassembles the loops as built for amd64 and arm64 (go
// tool objdump) and asserts the branch layout each expectation depends
// on, that nothing else branches or calls, and that the instruction loop's
// body is three instructions.
func TestLayout(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "loops.test")
			build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-c", "-o", bin, ".")
			build.Env = append(os.Environ(), "GOARCH="+arch, "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				testenv.Require(t, false, "cross-building the loops for "+arch+": "+err.Error()+"\n"+string(out))
			}
			out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "tool", "objdump", "-s", `loops\.(InstrLoop|Branch[1-7])`, bin).Output()
			if err != nil {
				t.Fatalf("go tool objdump: %v", err)
			}
			funcs := disassembly(out)
			for name, want := range layouts {
				insts, ok := funcs[name]
				if !ok {
					t.Errorf("%s: not in the %s binary", name, arch)
					continue
				}
				var got []branch
				for i, in := range insts {
					op := strings.Fields(in.text)[0]
					if op == "CALL" || op == "BL" || op == "JMP" && strings.Contains(in.text, "(") && !strings.Contains(in.text, "(PC)") {
						t.Errorf("%s: calls or jumps indirectly: %s", name, in.text)
					}
					cond, isBranch := mnemonics[arch][op]
					if !isBranch {
						if strings.HasPrefix(op, "J") || (arch == "arm64" && strings.HasPrefix(op, "B") && op != "BIC") {
							t.Errorf("%s: unexpected branch %s", name, in.text)
						}
						continue
					}
					target := in.target()
					got = append(got, branch{cond, target > in.addr})
					if name == "InstrLoop" {
						body := 0
						for _, b := range insts[:i+1] {
							if b.addr >= target {
								body++
							}
						}
						if body != 3 {
							t.Errorf("InstrLoop: the loop is %d instructions, want 3 (add, compare, branch)", body)
						}
					}
				}
				if !equal(got, want) {
					t.Errorf("%s on %s: branches %v, want %v\n%s", name, arch, got, want, dump(insts))
				}
			}
		})
	}
}

type inst struct {
	addr uint64
	text string
}

var hexAddr = regexp.MustCompile(`0x[0-9a-f]+`)

var pcRel = regexp.MustCompile(`(-?\d+)\(PC\)`)

// target is a branch's destination: the last address in its operands, or
// N(PC), N instructions of 4 bytes away (arm64).
func (in inst) target() uint64 {
	if m := pcRel.FindStringSubmatch(in.text); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return uint64(int64(in.addr) + 4*n)
	}
	all := hexAddr.FindAllString(in.text, -1)
	if len(all) == 0 {
		return 0
	}
	v, _ := strconv.ParseUint(all[len(all)-1][2:], 16, 64)
	return v
}

// disassembly splits objdump's output by function (short names, ABI
// suffix dropped): "TEXT pkg.Name.abi0(SB) file", then
// "  file:line  0xADDR  BYTES  TEXT" lines.
func disassembly(out []byte) map[string][]inst {
	funcs := map[string][]inst{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "TEXT "); ok {
			name := strings.TrimSuffix(strings.Fields(rest)[0], "(SB)")
			cur = ""
			if body, ok := strings.CutSuffix(name, ".abi0"); ok { // the assembly, not Go's wrapper
				cur = body[strings.LastIndex(body, ".")+1:]
			}
			continue
		}
		var f []string
		for _, x := range strings.Split(line, "\t") {
			if x = strings.TrimSpace(x); x != "" {
				f = append(f, x)
			}
		}
		if cur == "" || len(f) < 4 {
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			continue
		}
		funcs[cur] = append(funcs[cur], inst{addr, f[3]})
	}
	return funcs
}

func equal(a, b []branch) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func dump(insts []inst) string {
	var b strings.Builder
	for _, in := range insts {
		b.WriteString(strconv.FormatUint(in.addr, 16) + "  " + in.text + "\n")
	}
	return b.String()
}
