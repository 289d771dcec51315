package hostgate

import (
	"bufio"
	"regexp"
	"strconv"
	"strings"
)

// CPUIDLeaves are CPUID's registers (eax, ebx, ecx, edx) by leaf and subleaf,
// as the cpuid tool dumps them: the gate's cache and SMT oracle, and the
// fixtures of the exporter's own CPUID decoders.
type CPUIDLeaves map[[2]uint32][4]uint32

var cpuidLine = regexp.MustCompile(`^\s*(0x[0-9a-f]+) (0x[0-9a-f]+): eax=(0x[0-9a-f]+) ebx=(0x[0-9a-f]+) ecx=(0x[0-9a-f]+) edx=(0x[0-9a-f]+)`)

// ParseCPUID reads `cpuid -1 -r`: "   0x8000001d 0x03: eax=0x… ebx=0x… ecx=0x… edx=0x…";
// other lines are passed over.
func ParseCPUID(out string) CPUIDLeaves {
	l := CPUIDLeaves{}
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		m := cpuidLine.FindStringSubmatch(s.Text())
		if m == nil {
			continue
		}
		var v [6]uint32
		for i := range v {
			n, _ := strconv.ParseUint(m[i+1], 0, 32)
			v[i] = uint32(n)
		}
		l[[2]uint32{v[0], v[1]}] = [4]uint32{v[2], v[3], v[4], v[5]}
	}
	return l
}

// Get is a leaf's registers; a leaf the dump lacks reads zeros, as a CPU
// answers past its range.
func (l CPUIDLeaves) Get(leaf, sub uint32) [4]uint32 { return l[[2]uint32{leaf, sub}] }
