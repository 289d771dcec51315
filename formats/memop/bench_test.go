package memop

import (
	"encoding/hex"
	"slices"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// loopCode is code at loopStart, whatever the IP: loopHex is sharebench's
// loop (go tool objdump), two lock xadds, each followed by the instruction
// most samples land on.
type loopCode struct{ b []byte }

const loopStart = 0x4ccaa0

func (c loopCode) Text(_ uint32, ip uint64, _ []byte) (uint64, []byte, Reason) {
	return loopStart, c.b, Resolved
}

var loopHex = "31d2eb0348ffc24989f848c1e70d4931f84c89c749c1e8074931f84c89c749c1e0114931f84c89c749d1e84c39c1760d41b801000000f04c0fc100eb0b41b801000000f04c0fc10348f7c2ff03000075b3448b064585c074abc3"

// BenchmarkDecodeClassifyBoard is the address sampler's hot path once the
// instruction cache is warm: a sample's registers → the resolved access →
// ComDetective's board, alternating two threads over the loop's IPs.
func BenchmarkDecodeClassifyBoard(b *testing.B) {
	code, err := hex.DecodeString(loopHex)
	if err != nil {
		b.Fatal(err)
	}
	r, _ := NewResolver(loopCode{code}, "amd64")
	det := comdetect.New(comdetect.Options{})
	ips := []uint64{0x4ccadb, 0x4ccae8, 0x4ccad6, 0x4ccac2}
	var s perfrecord.Sample
	s.Has, s.RegsABI, s.PID = 0, 2, 1
	s.Regs[AMD64AX], s.Regs[AMD64BX] = 0x600680, 0x600700
	var acc memaccess.Access
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.IP, s.TID, s.CPU, s.Time = ips[i%len(ips)], uint32(10+i%2), uint32(i%2), uint64(i)
		var res Reason
		acc, res = r.Sample(&s, 1000)
		if res == Resolved {
			det.Add(&acc)
		}
	}
}

func TestLoopResolves(t *testing.T) {
	code, _ := hex.DecodeString(loopHex)
	r, _ := NewResolver(loopCode{code}, "amd64")
	var regs Regs
	regs[AMD64AX], regs[AMD64BX] = 0x600680, 0x600700
	for ip, want := range map[uint64]uint64{0x4ccadb: 0x600680, 0x4ccae8: 0x600700, 0x4ccad6: 0x600680} {
		a, res := r.Resolve(1, ip, &regs)
		if res != Resolved || a.Addr != want || a.Kind != RMW || !a.Atomic {
			t.Errorf("ip %#x: %+v %v, want the lock xadd on %#x", ip, a, res, want)
		}
	}
	if _, res := r.Resolve(1, 0x4ccac2, &regs); res != NoMemory { // xor after shl: neither has an operand
		t.Errorf("ip 0x4ccac2: %v", res)
	}
}

// In loopHex the jmp at 0x4ccadb, after the first lock xadd, lands at
// 0x4ccae8, the instruction after the second: a sample there followed the
// second atomic, or (on Intel, about 1.7% of the first's samples) the jump
// after the first. Samples there are the second's only while they outnumber
// what that skid could put there.
func TestJumpLanding(t *testing.T) {
	code, _ := hex.DecodeString(loopHex)
	const jump, landing = 0x4ccadb, 0x4ccae8
	var regs Regs
	regs[AMD64AX], regs[AMD64BX] = 0x600680, 0x600700
	for _, c := range []struct {
		name            string
		ips             []uint64
		second, dropped int
	}{
		// f = 1: the second atomic never runs; 2 of 102 samples skid past the jump.
		{"first only", append(slices.Repeat([]uint64{jump}, 100), slices.Repeat([]uint64{landing}, 2)...), 0, 2},
		// f = 0: the jump never runs.
		{"second only", slices.Repeat([]uint64{landing}, 100), 100, 0},
		// Both: the landing's samples outnumber a skid's share from the start.
		{"both", slices.Repeat([]uint64{jump, landing}, 50), 50, 0},
	} {
		second, dropped := resolveAll(t, c.name, code, &regs, c.ips,
			func(a Access) bool { return a.Addr == 0x600700 }, func(a Access) bool { return a.Addr == 0x600680 })
		if second != c.second || dropped != c.dropped {
			t.Errorf("%s: %d samples taken as the second atomic, %d ambiguous; want %d, %d", c.name, second, dropped, c.second, c.dropped)
		}
	}
}

// A loop's back edge that follows an access lands at the loop's head, whose
// instruction before it in the code (here a load before the loop) did not
// run: the resolver finds the jump after the IP too, decoding on to the
// function's end.
func TestBackEdgeLanding(t *testing.T) {
	code := []byte{
		0x48, 0x8b, 0x0f, // 0: mov (%rdi),%rcx, before the loop
		0x48, 0xff, 0xc2, // 3: L: inc %rdx
		0xf0, 0x4c, 0x0f, 0xc1, 0x00, // 6: lock xadd %r8,(%rax)
		0x75, 0xf6, // 11: jne L
		0xc3, // 13: ret
	}
	const head, jump = loopStart + 3, loopStart + 11
	var regs Regs
	regs[AMD64AX], regs[AMD64DI] = 0x600680, 0x600700
	for _, c := range []struct {
		name          string
		ips           []uint64
		load, dropped int
	}{
		// The loop spins: 2 of 102 samples skid past the back edge.
		{"loop", append(slices.Repeat([]uint64{jump}, 100), slices.Repeat([]uint64{head}, 2)...), 0, 2},
		// Only the entry: the load runs and the loop does not.
		{"entry", slices.Repeat([]uint64{head}, 100), 100, 0},
	} {
		load, dropped := resolveAll(t, c.name, code, &regs, c.ips,
			func(a Access) bool { return a.Addr == 0x600700 && a.PC == loopStart },
			func(a Access) bool { return a.Addr == 0x600680 && a.PC == loopStart+6 })
		if load != c.load || dropped != c.dropped {
			t.Errorf("%s: %d samples taken as the load, %d ambiguous; want %d, %d", c.name, load, dropped, c.load, c.dropped)
		}
	}
}

// resolveAll resolves ips in turn through a fresh resolver over code at
// loopStart and counts the samples resolved to an access that counted
// accepts, and the ambiguous ones; any other outcome than those two or an
// access other accepts is an error.
func resolveAll(t *testing.T, name string, code []byte, regs *Regs, ips []uint64, counted, other func(Access) bool) (n, ambiguous int) {
	t.Helper()
	r, _ := NewResolver(loopCode{code}, "amd64")
	for _, ip := range ips {
		a, res := r.Resolve(1, ip, regs)
		switch {
		case res == Resolved && counted(a):
			n++
		case res == Resolved && other(a):
		case res == Ambiguous:
			ambiguous++
		default:
			t.Errorf("%s: ip %#x: %+v %v", name, ip, a, res)
		}
	}
	if r.Unresolved[Ambiguous] != uint64(ambiguous) {
		t.Errorf("%s: the resolver counted %d ambiguous samples, %d returned", name, r.Unresolved[Ambiguous], ambiguous)
	}
	return n, ambiguous
}
