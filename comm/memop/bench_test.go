package memop

import (
	"encoding/hex"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/comm/cacheline"
	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// loopCode is sharebench's loop (go tool objdump): two lock xadds, each
// followed by the instruction most samples land on.
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
	var acc cacheline.Access
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
