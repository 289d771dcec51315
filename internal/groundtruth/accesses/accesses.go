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

// Entry is f's first instruction's address in this process, checked (with
// x86asm, on code read from /proc/self/mem) to be a mov of width bytes:
// the IP a precise sample of f's access carries. x86-64 only.
func Entry(f any, width int) (uint64, error) {
	pc := reflect.ValueOf(f).Pointer()
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	code := make([]byte, 16)
	if _, err := mem.ReadAt(code, int64(pc)); err != nil {
		return 0, fmt.Errorf("reading the code of %s: %w", runtime.FuncForPC(pc).Name(), err)
	}
	in, err := x86asm.Decode(code, 64)
	if err != nil || in.Op != x86asm.MOV || in.MemBytes != width {
		return 0, fmt.Errorf("%s's first instruction is %v (%v), not a %d-byte mov: the compiler changed it", runtime.FuncForPC(pc).Name(), in, err, width)
	}
	return uint64(pc), nil
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
