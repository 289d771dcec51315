// Package accesses holds functions whose one memory access is known from
// their source, for tests that give the decoder a sample in them (a
// precise sample's IP is its accessing instruction): Store8 stores 8
// bytes, Load4 loads 4.
package accesses

import (
	"fmt"
	"os"
	"reflect"
	"runtime"

	"golang.org/x/arch/x86/x86asm"
)

// Store8 stores v at p: an 8-byte store.
//
//go:noinline
func Store8(p *uint64, v uint64) { *p = v }

// Load4 loads p: a 4-byte load.
//
//go:noinline
func Load4(p *uint32) uint32 { return *p }

// Entry is the address, in this process, of f's memory access: the first
// mov of width bytes whose address is not on the stack, found by decoding
// f (x86asm, on code read from /proc/self/mem) from its start: its first
// instruction, or, under the race detector, the one after the
// instrumentation's calls. It is the IP a precise sample of f's access
// carries. x86-64 only.
func Entry(f any, width int) (uint64, error) {
	pc := reflect.ValueOf(f).Pointer()
	name := runtime.FuncForPC(pc).Name()
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	code := make([]byte, 256)
	if _, err := mem.ReadAt(code, int64(pc)); err != nil {
		return 0, fmt.Errorf("reading the code of %s: %w", name, err)
	}
	for off := 0; off < len(code)-16; {
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s+%#x: %w", name, off, err)
		}
		if in.Op == x86asm.MOV && in.MemBytes == width {
			for _, a := range in.Args {
				if m, ok := a.(x86asm.Mem); ok && m.Base != x86asm.RSP && m.Base != x86asm.RBP && m.Segment == 0 {
					return uint64(pc) + uint64(off), nil
				}
			}
		}
		if in.Op == x86asm.RET {
			break
		}
		off += in.Len
	}
	return 0, fmt.Errorf("%s has no %d-byte mov off the stack: the compiler changed it", name, width)
}

// Entries are Store8's and Load4's checked entries (Entry): the IPs of a
// known 8-byte store and a known 4-byte load.
func Entries() (store8, load4 uint64, err error) {
	if store8, err = Entry(Store8, 8); err != nil {
		return 0, 0, err
	}
	load4, err = Entry(Load4, 4)
	return store8, load4, err
}
