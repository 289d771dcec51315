package memop

import (
	"runtime"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// countingCode counts the Text calls at each IP of the code it serves.
type countingCode struct {
	Code
	calls map[uint64]int
}

func (c countingCode) Text(pid uint32, ip uint64, buf []byte) (uint64, []byte, Reason) {
	c.calls[ip]++
	return c.Code.Text(pid, ip, buf)
}

// libcIPs are the instruction starts of every sized function of the C
// library (about 108,000 on Debian 13), with the code serving them.
func libcIPs(t *testing.T) (elfCode, []uint64) {
	t.Helper()
	code, _, _ := firstFunctions(t)
	var ips []uint64
	for _, fn := range code.funcs {
		ips = append(ips, code.starts(fn)...)
	}
	return code, ips
}

// heapWith is the live heap, after a collection, that resolving ips
// through a resolver bounded at bound leaves (0: unbounded), and that
// resolver.
func heapWith(code Code, ips []uint64, bound int) (uint64, *Resolver) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, _ := NewResolver(code, "amd64")
	if bound > 0 {
		r.SetCacheBytes(bound)
	} else {
		r.SetCacheBytes(1 << 40)
	}
	var regs Regs
	for i, ip := range ips {
		r.Resolve(uint32(1+i%4), ip, &regs) // four processes mapping the same library
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(r)
	return after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc), r
}

// A daemon decodes what every process it samples runs: the cache keeps to
// its bound in the Go runtime's own heap accounting, where without one it
// holds every instruction ever sampled; its estimate of what it holds
// (exported, and what the bound is checked against) is within a third of
// the heap.
func TestCacheBound(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the binaries on this machine must be x86-64")
	code, ips := libcIPs(t)
	const bound = 4 << 20
	unbounded, r := heapWith(code, ips, 0)
	t.Logf("%d IPs: unbounded %d bytes (estimated %d), %.0f bytes an instruction", len(ips), unbounded, r.CacheBytes(), float64(unbounded)/float64(len(ips)))
	if r.Evicted != 0 {
		t.Errorf("an unbounded cache evicted %d instructions", r.Evicted)
	}
	if est := float64(r.CacheBytes()); est < 0.67*float64(unbounded) || est > 1.33*float64(unbounded) {
		t.Errorf("the cache estimates it holds %.0f bytes, the heap grew by %d", est, unbounded)
	}
	if unbounded < 2*bound {
		t.Fatalf("the library decoded to %d bytes, too little to test a %d-byte bound", unbounded, bound)
	}
	bounded, r := heapWith(code, ips, bound)
	t.Logf("bounded at %d: heap %d bytes, estimated %d, %d instructions evicted", bound, bounded, r.CacheBytes(), r.Evicted)
	if bounded > bound*5/4 {
		t.Errorf("bounded at %d bytes, the cache left %d bytes on the heap", bound, bounded)
	}
	if r.CacheBytes() > bound || r.Evicted == 0 || r.Outcomes().Evicted != r.Evicted || r.Outcomes().CacheBytes != r.CacheBytes() {
		t.Errorf("bounded at %d bytes: estimated %d, %d evicted, outcomes %+v", bound, r.CacheBytes(), r.Evicted, r.Outcomes())
	}
	for pid := uint32(1); pid <= 4; pid++ {
		r.Forget(pid)
	}
	if r.CacheBytes() != 0 {
		t.Errorf("every process forgotten, the cache still counts %d bytes", r.CacheBytes())
	}
}

// What is used between two turns of the cache survives them: an IP sampled
// between the library's other instructions is decoded once, and its sample
// count (which the skid check weighs) is kept; an instruction not used
// since its generation turned old is decoded again.
func TestCacheKeepsWhatIsUsed(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the binaries on this machine must be x86-64")
	elf, ips := libcIPs(t)
	code := countingCode{elf, map[uint64]int{}}
	r, _ := NewResolver(code, "amd64")
	r.SetCacheBytes(1 << 20)
	hot := ips[len(ips)/2]
	var regs Regs
	sampled := uint64(0) // samples at hot
	for i, ip := range ips {
		r.Resolve(1, ip, &regs)
		if ip == hot {
			sampled++
		}
		if i%100 == 0 {
			r.Resolve(1, hot, &regs)
			sampled++
		}
	}
	if r.Evicted == 0 {
		t.Fatal("nothing evicted: the test needs a bound the library exceeds")
	}
	if code.calls[hot] != 1 {
		t.Errorf("the hot IP was decoded %d times", code.calls[hot])
	}
	if e := r.lookup(1, hot); e.samples != sampled {
		t.Errorf("the hot IP counts %d samples, want %d", e.samples, sampled)
	}
	first := ips[0]
	r.Resolve(1, first, &regs)
	if code.calls[first] != 2 {
		t.Errorf("an instruction evicted long ago was decoded %d times, want 2", code.calls[first])
	}
}

// Eviction changes what is kept, not what is decoded: with a bound that
// turns the cache over many times, every IP's instruction, the one before
// it and the jump landing on it (where the resolver looks for one) are
// those an unbounded resolver finds.
func TestCacheEvictionDecodesAlike(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the binaries on this machine must be x86-64")
	code, ips := libcIPs(t)
	for i := range ips { // a fixed shuffle: functions' passes are evicted half made
		j := (i * 7919) % len(ips)
		ips[i], ips[j] = ips[j], ips[i]
	}
	bounded, _ := NewResolver(code, "amd64")
	bounded.SetCacheBytes(256 << 10)
	unbounded, _ := NewResolver(code, "amd64")
	unbounded.SetCacheBytes(1 << 40)
	for _, ip := range ips {
		b, u := *bounded.lookup(1, ip), *unbounded.lookup(1, ip)
		used := u.prev.ReadsAfter() && (u.prev.Atomic || u.at.Reason != Resolved)
		if b.at != u.at || b.prev != u.prev || b.prevPC != u.prevPC || b.reason != u.reason || used && b.jumpPC != u.jumpPC {
			t.Fatalf("%#x: bounded %+v, unbounded %+v", ip, b, u)
		}
	}
	if bounded.Evicted < uint64(len(ips)/2) {
		t.Errorf("only %d of %d instructions evicted: the bound did not turn the cache over", bounded.Evicted, len(ips))
	}
}
