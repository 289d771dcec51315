package memop

import (
	"debug/elf"
	"runtime"
	"sort"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// elfCode serves a binary's functions as Text does: from the start of the
// function holding ip (its ELF symbol) to the function's end.
type elfCode struct {
	funcs   []elf.Symbol // FUNC symbols with a size, by address
	bytesAt func(addr uint64) []byte
}

func (c elfCode) Text(_ uint32, ip uint64, _ []byte) (uint64, []byte, Reason) {
	i := sort.Search(len(c.funcs), func(i int) bool { return c.funcs[i].Value > ip }) - 1
	if i < 0 || ip >= c.funcs[i].Value+c.funcs[i].Size {
		return 0, nil, Unreadable
	}
	f := c.funcs[i]
	b := c.bytesAt(f.Value)
	return f.Value, b[:min(len(b), int(f.Size)+MaxInsn)], Resolved
}

// scanFor is the instruction before ip and the first jump that follows an
// access and lands on ip, found the plain way: decoding the function from
// its start for this one IP, up to the first instruction the decoder does
// not know. onBoundary: an instruction ends at ip.
func scanFor(b []byte, off int) (prev, jump int, onBoundary bool) {
	prev, jump = -1, -1
	last := NoMemory
	for pos := 0; pos < len(b); {
		o := DecodeAMD64(b[pos:])
		if o.Len == 0 {
			break
		}
		end := pos + int(o.Len)
		if o.Jump && last == Resolved && int64(end)+o.Rel == int64(off) && jump < 0 {
			jump = pos
		}
		if end == off {
			prev, onBoundary = pos, true
		}
		pos, last = end, o.Reason
	}
	return prev, jump, onBoundary
}

// firstFunctions serves the sized functions of the first oracle binary
// (the C library) as Text does, and returns its first 300, by address.
func firstFunctions(tb testing.TB) (code elfCode, lib string, funcs []elf.Symbol) {
	tb.Helper()
	bins := oracleBinaries(tb)
	testenv.Require(tb, len(bins) > 0, "needs the C library or another x86-64 binary")
	lib = bins[0]
	f, err := elf.Open(lib)
	if err != nil {
		tb.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Size < maxScan && !seen[s.Value] {
			seen[s.Value] = true
			funcs = append(funcs, s)
		}
	}
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].Value < funcs[j].Value })
	code = elfCode{funcs: funcs, bytesAt: sectionBytes(tb, lib)}
	return code, lib, funcs[:min(len(funcs), 300)]
}

// starts are the addresses of fn's instructions, decoding from its start.
func (c elfCode) starts(fn elf.Symbol) []uint64 {
	var out []uint64
	b := c.bytesAt(fn.Value)[:fn.Size]
	for pos := 0; pos < len(b); {
		o := DecodeAMD64(b[pos:])
		if o.Len == 0 {
			break
		}
		out = append(out, fn.Value+uint64(pos))
		pos += int(o.Len)
	}
	return out
}

// The resolver decodes each function once for all its IPs (funcPass), as
// far as they need; at
// every instruction of the C library's first thousand sized functions, and
// at a byte inside each, it finds what decoding the function for that IP
// alone finds: the instruction before it, the jump landing on it (one after
// it where the instruction before would be taken), or that the IP is on no
// instruction boundary. The IPs come in a shuffled order,
// so that a function's pass is usually made for an IP in its middle.
func TestFunctionPassAgreesWithScan(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the binaries on this machine must be x86-64")
	code, lib, funcs := firstFunctions(t)
	var ips []uint64
	for _, fn := range funcs {
		for _, ip := range code.starts(fn) {
			ips = append(ips, ip)
			if o := DecodeAMD64(code.bytesAt(ip)); o.Len > 1 {
				ips = append(ips, ip+1) // inside an instruction
			}
		}
	}
	for i := range ips { // a fixed shuffle
		j := (i * 7919) % len(ips)
		ips[i], ips[j] = ips[j], ips[i]
	}
	r, _ := NewResolver(code, "amd64")
	var checked, boundaries, landings int
	for _, ip := range ips {
		start, b, _ := code.Text(0, ip, nil)
		off := int(ip - start)
		if off == 0 {
			continue
		}
		prev, jump, onBoundary := scanFor(b, off)
		e := r.lookup(1, ip)
		checked++
		switch {
		case onBoundary:
			boundaries++
			if e.prevPC != start+uint64(prev) || e.prev != DecodeAMD64(b[prev:]) {
				t.Fatalf("%#x: instruction before at %#x (%+v), want %#x", ip, e.prevPC, e.prev, start+uint64(prev))
			}
		case e.prevPC != 0:
			t.Fatalf("%#x: on no boundary, yet an instruction before at %#x", ip, e.prevPC)
		}
		wantJump := uint64(0)
		if jump >= 0 && onBoundary {
			wantJump = start + uint64(jump)
			landings++
		}
		// A jump after the IP is looked for only where the instruction
		// before would be taken, unless another IP's pass already went
		// past it.
		used := onBoundary && e.prev.ReadsAfter() && (e.prev.Atomic || e.at.Reason != Resolved)
		if onBoundary && e.jumpPC != wantJump && (used || jump < off || e.jumpPC != 0) {
			t.Fatalf("%#x: jump landing from %#x, want %#x", ip, e.jumpPC, wantJump)
		}
	}
	t.Logf("%d IPs in %d functions of %s: %d on boundaries, %d where a jump after an access lands", checked, len(funcs), lib, boundaries, landings)
	if boundaries < 5000 || landings < 50 {
		t.Errorf("too little compared: %d boundaries, %d landings", boundaries, landings)
	}
}

// BenchmarkColdLibc is the cold path on the C library's code: one op
// resolves, through a fresh resolver, every instruction of its first 300
// sized functions ("every-ip": the most a function's single pass saves)
// or one instruction in the middle of each ("one-ip": the least).
func BenchmarkColdLibc(b *testing.B) {
	code, _, funcs := firstFunctions(b)
	every, one := []uint64{}, []uint64{}
	for _, fn := range funcs {
		starts := code.starts(fn)
		every = append(every, starts...)
		if len(starts) > 1 {
			one = append(one, starts[len(starts)/2])
		}
	}
	var regs Regs
	for _, c := range []struct {
		name string
		ips  []uint64
	}{{"every-ip", every}, {"one-ip", one}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				r, _ := NewResolver(code, "amd64")
				for _, ip := range c.ips {
					r.Resolve(1, ip, &regs)
				}
			}
			b.ReportMetric(float64(len(c.ips)), "ips/op")
		})
	}
}
