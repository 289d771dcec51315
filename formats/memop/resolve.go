package memop

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// Code finds a process's instruction bytes. Text returns the bytes from
// start (the start of the function holding ip where symbols say, else ip
// itself) to at least MaxInsn bytes past ip, and to the function's end
// where symbols say (the resolver looks there for jumps back to ip), using
// buf when it is large enough; a reason other than Resolved says why there
// are none (Kernel, JIT, Unreadable).
type Code interface {
	Text(pid uint32, ip uint64, buf []byte) (start uint64, b []byte, r Reason)
}

// MaxInsn is the longest x86 instruction.
const MaxInsn = 15

// maxScan bounds how far before ip the previous instruction's boundary is
// looked for, decoding forward from the function's start.
const maxScan = 16 << 10

// Access is a resolved sampled access.
type Access struct {
	Addr   uint64
	PC     uint64 // the instruction's address
	Width  uint16
	Kind   Kind
	Atomic bool
	// Prev: the instruction is the one before the sampled IP (a timer
	// interrupt is taken after it retired), not the one at it.
	Prev bool
}

// entry is what the resolver caches per instruction address.
type entry struct {
	at, prev Operand
	prevPC   uint64
	reason   Reason // of the code lookup
	// jumpPC is a jump to this address that follows a memory access
	// (found decoding the function from its start; 0: none), before it or,
	// a loop's back edge, after it: a sample taken after the jump ran
	// lands here too, and the instruction before this one in the code did
	// not run.
	jumpPC uint64
	// samples counts the samples with this IP.
	samples uint64
}

// skidShare bounds the share of samples that a timer interrupt takes after
// the jump following an access rather than at the jump, against those at
// the jump: 0 on AMD Zen 2, about 1.7% on an Intel Xeon of family 6, model
// 207 (docs/sampling.md). Samples where such a jump lands are attributed to
// the instruction before them in the code only while they outnumber this
// share of the jump's own.
const skidShare = 0.1

// Resolver turns (pid, ip, registers) into an access, decoding each
// distinct instruction address of a process once, and keeping what it
// decoded within a bound (SetCacheBytes): a daemon samples processes for
// months, each its own copy of the libraries they share (the C library
// alone is 108,000 instructions, 20 MB decoded).
type Resolver struct {
	code       Code
	decodeInsn func([]byte) Operand
	fixed      uint64 // the instruction length where it is fixed (arm64: 4), else 0
	trapsAt    bool   // a data watchpoint traps before the access (arm64), not after it (x86)
	// cur and old are the cache's two generations: lookups fill cur and
	// move what they find in old to cur; once cur holds half the bound,
	// old is dropped and cur becomes old. What was used since the last
	// turn survives it.
	cur, old   generation
	cacheBytes int
	buf        []byte
	// Unresolved counts samples without an address, by Reason.
	Unresolved [NumReasons]uint64
	// Resolved counts samples with one, by candidate: [0] at the IP, [1]
	// the instruction before it.
	Resolved [2]uint64
	// Widths counts precise samples (Precise) by whether the instruction
	// at their IP gave the access width: [0] no, [1] yes.
	Widths [2]uint64
	// Evicted counts the instructions dropped from the cache for its bound.
	Evicted uint64
}

// DefaultCacheBytes bounds a resolver's cache unless SetCacheBytes says
// otherwise: about 170,000 instructions with their functions' passes.
const DefaultCacheBytes = 32 << 20

// generation is one half of the resolver's cache: decoded instructions by
// pid and address, the functions' passes by pid and start, and what they
// hold in bytes, as estimated by entryBytes and funcPass.bytes.
type generation struct {
	procs   map[uint32]map[uint64]*entry
	funcs   map[uint32]map[uint64]*funcPass
	entries int
	bytes   int
}

func newGeneration() generation {
	return generation{procs: map[uint32]map[uint64]*entry{}, funcs: map[uint32]map[uint64]*funcPass{}}
}

// entryBytes is what a cached instruction holds: the entry and its
// pointer and key in a map (a map slot costs about its key and value
// again, in buckets kept partly empty). TestCacheBound weighs it against
// the heap.
const entryBytes = int(unsafe.Sizeof(entry{})) + 2*(8+8)

// bytes is what the pass holds: the struct, its starts, its landings.
func (f *funcPass) bytes() int {
	return int(unsafe.Sizeof(*f)) + 2*cap(f.starts) + 2*(2+2)*len(f.landings)
}

// forget drops pid's instructions and passes in [start, end).
func (g *generation) forget(pid uint32, start, end uint64) {
	for ip := range g.procs[pid] {
		if ip >= start && ip < end {
			delete(g.procs[pid], ip)
			g.entries--
			g.bytes -= entryBytes
		}
	}
	if len(g.procs[pid]) == 0 {
		delete(g.procs, pid)
	}
	for at, f := range g.funcs[pid] {
		if at >= start && at < end {
			delete(g.funcs[pid], at)
			g.bytes -= f.bytes()
		}
	}
	if len(g.funcs[pid]) == 0 {
		delete(g.funcs, pid)
	}
}

// NewResolver reads code through code, for arch (GOARCH spelling: amd64
// or arm64).
func NewResolver(code Code, arch string) (*Resolver, error) {
	r := &Resolver{code: code, cur: newGeneration(), old: newGeneration(), cacheBytes: DefaultCacheBytes, buf: make([]byte, 0, 4096)}
	switch arch {
	case "amd64":
		r.decodeInsn = DecodeAMD64
	case "arm64":
		r.decodeInsn, r.fixed, r.trapsAt = DecodeARM64, 4, true
	default:
		return nil, fmt.Errorf("decoding %s instructions is not supported (amd64 and arm64 are)", arch)
	}
	return r, nil
}

// NewUndecodingResolver is a resolver for an architecture whose
// instructions it cannot decode (a recording from armv7 or i686): every
// sample that needs its instruction is undecodable, and precise samples
// keep their data address without a width. The recording is still read.
func NewUndecodingResolver(code Code) *Resolver {
	return &Resolver{code: code, cur: newGeneration(), old: newGeneration(), cacheBytes: DefaultCacheBytes, buf: make([]byte, 0, 4096),
		decodeInsn: func([]byte) Operand { return Operand{Reason: Undecodable} }}
}

// SetCacheBytes bounds what the resolver keeps of decoded code to n bytes
// (as CacheBytes estimates them); an instruction dropped for it is decoded
// again if sampled again.
func (r *Resolver) SetCacheBytes(n int) { r.cacheBytes = n }

// CacheBytes is what the cache holds now, as estimated for its bound.
func (r *Resolver) CacheBytes() int { return r.cur.bytes + r.old.bytes }

// RegsMask is the sample_regs_user that gives the resolver every general
// register of arch.
func RegsMask(arch string) uint64 {
	if arch == "arm64" {
		return ARM64RegsMask
	}
	return AMD64RegsMask
}

// Outcomes are a resolver's counts, copied.
type Outcomes struct {
	Unresolved [NumReasons]uint64
	Resolved   [2]uint64
	Widths     [2]uint64
	// CacheBytes is what the cache of decoded code holds (estimated), and
	// Evicted the instructions its bound dropped.
	CacheBytes int
	Evicted    uint64
	// SymbolBytes is what the decoder's code map keeps of the sampled
	// binaries' symbol and line tables (estimated), and SymbolsRefused the
	// tables it left unread for its bound: the decoder adds them.
	SymbolBytes    int64
	SymbolsRefused uint64
	// ReadsTimedOut are the reads of code, maps and binaries given up on
	// for not returning in time (a stalled mount, a fault never served):
	// the decoder adds them.
	ReadsTimedOut uint64
}

// Outcomes copies the counts.
func (r *Resolver) Outcomes() Outcomes {
	return Outcomes{Unresolved: r.Unresolved, Resolved: r.Resolved, Widths: r.Widths, CacheBytes: r.CacheBytes(), Evicted: r.Evicted}
}

// UnresolvedText lists the reasons samples did not resolve, with their
// counts ("unreadable_code 12, kernel 3"), or "" where every one did: what a
// report or an error shows a user whose recording found no accesses.
func (o Outcomes) UnresolvedText() string {
	var parts []string
	for i, n := range o.Unresolved {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", Reason(i), n))
		}
	}
	return strings.Join(parts, ", ")
}

// Forget drops what is cached of pid: after an exec, or its exit.
func (r *Resolver) Forget(pid uint32) { r.Unmap(pid, 0, math.MaxUint64) }

// Unmap drops pid's cached instructions and functions in [start, end): a
// new mapping took that range.
func (r *Resolver) Unmap(pid uint32, start, end uint64) {
	r.cur.forget(pid, start, end)
	r.old.forget(pid, start, end)
}

// Resolve attributes a user-mode sample at ip with registers regs (nil or
// abi 0: none) to an access, or says why it cannot.
func (r *Resolver) Resolve(pid uint32, ip uint64, regs *Regs) (Access, Reason) {
	if regs == nil {
		r.Unresolved[NoRegisters]++
		return Access{}, NoRegisters
	}
	e := r.lookup(pid, ip)
	if e.reason != Resolved {
		r.Unresolved[e.reason]++
		return Access{}, e.reason
	}
	// The instruction before the IP when it is atomic (a timer interrupt
	// is taken after the locked instruction that held it: 84% of samples
	// on the ground-truth benchmark, docs/sampling.md) or when the IP's own
	// instruction accesses no memory, provided its address registers
	// survive it; else the instruction at the IP.
	// But not where a jump after another access lands (while a skid past
	// the jump explains the samples there) or an indirect branch does
	// (endbr64): the instruction before may not have run.
	prevOK := e.prevPC != 0 && e.prev.ReadsAfter()
	usePrev := prevOK && (e.prev.Atomic || e.at.Reason != Resolved)
	e.samples++
	if usePrev && (e.at.Landing || e.jumpPC != 0 && !r.fallsThrough(pid, e)) {
		r.Unresolved[Ambiguous]++
		return Access{}, Ambiguous
	}
	o, pc := &e.at, ip
	if usePrev {
		o, pc = &e.prev, e.prevPC
	}
	if o.Reason != Resolved {
		r.Unresolved[o.Reason]++
		return Access{}, o.Reason
	}
	k := 0
	if usePrev {
		k = 1
	}
	r.Resolved[k]++
	return Access{Addr: o.Address(regs, pc), PC: pc, Width: o.Width, Kind: o.Kind, Atomic: o.Atomic, Prev: usePrev}, Resolved
}

// Trap resolves the access that made a data watchpoint trap at ip, with
// regs those at the trap. An x86 debug register traps after the access,
// so the access is the instruction before ip (Before). An arm64
// watchpoint is taken before the access runs, which the kernel then steps
// over: the access is the instruction at ip, its address registers not yet
// updated by it (a pre- or post-indexed store's base included).
func (r *Resolver) Trap(pid uint32, ip uint64, regs *Regs) (Access, Reason) {
	return r.trapped(pid, ip, regs, r.trapsAt)
}

// Before resolves the instruction that ran just before ip: a data
// watchpoint traps after the access (x86), so its IP is the next
// instruction's; regs are those at the trap. Where an indirect branch
// lands (endbr64), the access may have been the branch's own read of its
// target (jmp *(%rax)), at another address: Ambiguous.
func (r *Resolver) Before(pid uint32, ip uint64, regs *Regs) (Access, Reason) {
	return r.trapped(pid, ip, regs, false)
}

// trapped resolves a trap's access: the instruction at ip, or the one
// before it.
func (r *Resolver) trapped(pid uint32, ip uint64, regs *Regs, at bool) (Access, Reason) {
	if regs == nil {
		return Access{}, NoRegisters
	}
	e := r.lookup(pid, ip)
	switch {
	case e.reason != Resolved:
		return Access{}, e.reason
	case at && e.at.Reason != Resolved:
		return Access{}, e.at.Reason
	case at:
		o := &e.at
		return Access{Addr: o.Address(regs, ip), PC: ip, Width: o.Width, Kind: o.Kind, Atomic: o.Atomic}, Resolved
	case e.prevPC == 0:
		return Access{}, Unreadable // no instruction boundary found before ip
	case e.at.Landing:
		return Access{}, Ambiguous
	case e.prev.Reason != Resolved:
		return Access{}, e.prev.Reason
	case !e.prev.ReadsAfter():
		return Access{}, NoRegisters // it overwrote its own address registers
	}
	o := &e.prev
	return Access{Addr: o.Address(regs, e.prevPC), PC: e.prevPC, Width: o.Width, Kind: o.Kind, Atomic: o.Atomic, Prev: true}, Resolved
}

// fallsThrough says whether a sample at a jump's landing (e) is taken as
// the access before it in the code: while the samples there outnumber what
// the skid past the jump could put there.
func (r *Resolver) fallsThrough(pid uint32, e *entry) bool {
	var atJump uint64
	if j := r.cur.procs[pid][e.jumpPC]; j != nil {
		atJump = j.samples
	} else if j := r.old.procs[pid][e.jumpPC]; j != nil {
		atJump = j.samples
	}
	return float64(e.samples) > skidShare*float64(atJump)
}

func (r *Resolver) lookup(pid uint32, ip uint64) *entry {
	m := r.cur.procs[pid]
	if e, ok := m[ip]; ok {
		return e
	}
	e, ok := r.old.procs[pid][ip]
	if ok {
		delete(r.old.procs[pid], ip)
		r.old.entries--
		r.old.bytes -= entryBytes
	} else {
		d := r.decode(pid, ip)
		e = &d
	}
	if m == nil {
		m = map[uint64]*entry{}
		r.cur.procs[pid] = m
	}
	m[ip] = e
	r.cur.entries++
	r.cur.bytes += entryBytes
	r.turn()
	return e
}

// turn drops the old generation once the current one holds half the
// bound, or both more than all of it (a function's pass grew); and the
// current one too where it alone holds more (a pass larger than the
// bound), so that the cache never holds more than its bound.
func (r *Resolver) turn() {
	if r.cur.bytes < r.cacheBytes/2 && r.cur.bytes+r.old.bytes <= r.cacheBytes {
		return
	}
	r.Evicted += uint64(r.old.entries)
	r.old, r.cur = r.cur, newGeneration()
	if r.old.bytes > r.cacheBytes {
		r.Evicted += uint64(r.old.entries)
		r.old = newGeneration()
	}
}

// decode reads the code around ip and decodes the instruction at it and,
// decoding forward from the function's start, the one before it.
func (r *Resolver) decode(pid uint32, ip uint64) entry {
	start, b, reason := r.code.Text(pid, ip, r.buf[:cap(r.buf)])
	if reason != Resolved {
		return entry{reason: reason}
	}
	if ip < start || ip-start >= uint64(len(b)) {
		return entry{reason: Unreadable}
	}
	e := entry{at: r.decodeInsn(b[ip-start:])}
	if r.fixed != 0 && ip-start >= r.fixed {
		e.prev, e.prevPC = r.decodeInsn(b[ip-start-r.fixed:]), ip-r.fixed
		return e
	}
	if start == ip || ip-start > maxScan {
		return e
	}
	f := r.passOf(pid, start, len(b))
	off := ip - start
	r.grow(f, b, int(off))
	prev := -1
	switch at := int(off); {
	case at == f.size: // the pass just reached ip
		prev = int(f.starts[len(f.starts)-1])
	case at < f.size:
		i, ok := slices.BinarySearch(f.starts, uint16(off))
		if !ok {
			return entry{at: e.at} // ip is not on an instruction boundary from the function's start
		}
		prev = int(f.starts[i-1]) // off > 0 = starts[0]
	}
	found := prev >= 0 // else the pass stopped before ip, at an instruction the decoder does not know
	if found {
		e.prev, e.prevPC = r.decodeInsn(b[prev:]), start+uint64(prev)
	}
	// A jump to ip after it, a loop's back edge, is looked for only where
	// it could matter: where Resolve would take the instruction before.
	if _, ok := f.landings[uint16(off)]; !ok && found && e.prev.ReadsAfter() && (e.prev.Atomic || e.at.Reason != Resolved) {
		r.grow(f, b, len(b))
	}
	if j, ok := f.landings[uint16(off)]; ok {
		e.jumpPC = start + uint64(j)
	}
	return e // found, or past an instruction the decoder does not know
}

// funcPass is a decoding pass over a function's code from its start,
// which every IP in it then shares, made as far as the IPs so far needed:
// where its instructions start, and where the direct jumps that follow a
// memory access land (a sample taken after such a jump ran lands there
// too: before the IP, or after it, a loop's back edge). Decoding from the
// start for each new IP was most of the cold path's time
// (BenchmarkResolveCold in formats/codemap, BenchmarkColdLibc).
type funcPass struct {
	read     int               // the bytes the pass may decode
	size     int               // decoded so far: instructions start before it
	last     Reason            // of the instruction before size
	stopped  bool              // at size is an instruction the decoder does not know
	starts   []uint16          // offsets of the instructions, ascending
	landings map[uint16]uint16 // a jump's target → the first such jump, as offsets
}

// passOf is pid's pass over the n bytes of code from start, begun anew
// when there are more of them than it had (Text reads at most 16 KiB past
// an IP).
func (r *Resolver) passOf(pid uint32, start uint64, n int) *funcPass {
	fs := r.cur.funcs[pid]
	if f := fs[start]; f != nil && n <= f.read {
		return f
	}
	if fs == nil {
		fs = map[uint64]*funcPass{}
		r.cur.funcs[pid] = fs
	}
	if f := fs[start]; f != nil {
		r.cur.bytes -= f.bytes()
	}
	f := r.old.funcs[pid][start]
	if f != nil {
		delete(r.old.funcs[pid], start)
		r.old.bytes -= f.bytes()
	}
	if f == nil || n > f.read {
		f = &funcPass{read: min(n, math.MaxUint16), last: NoMemory}
	}
	fs[start] = f
	r.cur.bytes += f.bytes()
	return f
}

// grow extends f, a pass of the current generation, counting what it
// grows by against the cache's bound.
func (r *Resolver) grow(f *funcPass, b []byte, upTo int) {
	before := f.bytes()
	f.extend(r.decodeInsn, b, upTo)
	r.cur.bytes += f.bytes() - before
}

// extend decodes on until the next instruction starts at or past upTo,
// at the end of b, or is one the decoder does not know.
func (f *funcPass) extend(decode func([]byte) Operand, b []byte, upTo int) {
	n := min(len(b), f.read)
	for f.size < min(upTo, n) && !f.stopped {
		o := decode(b[f.size:])
		if o.Len == 0 {
			f.stopped = true
			return
		}
		f.starts = append(f.starts, uint16(f.size))
		end := f.size + int(o.Len)
		if t := int64(end) + o.Rel; o.Jump && f.last == Resolved && t >= 0 && t < int64(n) {
			if f.landings == nil {
				f.landings = map[uint16]uint16{}
			}
			if _, ok := f.landings[uint16(t)]; !ok {
				f.landings[uint16(t)] = uint16(f.size)
			}
		}
		f.size, f.last = end, o.Reason
	}
}

// Sample resolves a timer sample taken with PERF_SAMPLE_REGS_USER into the
// sampled-access stream the cache-line table and the communication
// matrices read; period is what it stands for when the record carries no
// PERIOD. Samples in kernel mode, or of kernel threads, carry no user
// registers at the IP.
func (r *Resolver) Sample(s *perfrecord.Sample, period uint64) (memaccess.Access, Reason) {
	if s.Has&unix.PERF_SAMPLE_PERIOD != 0 {
		period = s.Period
	}
	var regs *Regs
	if s.RegsABI != 0 {
		regs = &s.Regs
	}
	if s.IP >= kernelStart {
		r.Unresolved[Kernel]++
		return memaccess.Access{}, Kernel
	}
	a, reason := r.Resolve(s.PID, s.IP, regs)
	if reason != Resolved {
		return memaccess.Access{}, reason
	}
	return memaccess.Access{Addr: a.Addr, Size: uint8(min(a.Width, 255)), PID: s.PID, TID: s.TID, CPU: s.CPU,
		Store: a.Kind&Store != 0, Period: period, Time: s.Time, IP: a.PC}, Resolved
}

// kernelStart is where x86-64 and arm64 kernel addresses begin.
const kernelStart = 0xffff800000000000

// Precise completes a precise memory sample (PEBS, IBS, SPE: the record
// has the data address, and its data source says load or store) with what
// the record lacks, the access width: from the instruction at the sample's
// IP, or, with ipAfter (PEBS at precise_ip 1, whose IP is the next
// instruction's), the one before it. The widths decide true against false
// sharing (the byte-range overlap rule); ComDetective decodes PEBS IPs with
// XED for them. ok is false for a sample that is neither a load nor a
// store, which the table and the detector do not take; sized says whether
// a width was found (else Size is 0: one byte).
func (r *Resolver) Precise(s *perfrecord.Sample, period uint64, ipAfter bool) (a memaccess.Access, ok, sized bool) {
	if a, ok = memaccess.FromSample(s, period); !ok {
		return a, false, false
	}
	if s.IP >= kernelStart {
		r.Widths[0]++
		return a, true, false
	}
	e := r.lookup(s.PID, s.IP)
	o := &e.at
	if ipAfter {
		o = &e.prev
		if e.prevPC == 0 {
			o = &Operand{Reason: Unreadable}
		}
	}
	if e.reason != Resolved || o.Reason != Resolved || o.Width == 0 {
		r.Widths[0]++
		return a, true, false
	}
	r.Widths[1]++
	a.Size = uint8(min(o.Width, 255))
	return a, true, true
}
