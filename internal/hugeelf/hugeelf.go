// Package hugeelf makes, for tests, the ELF file a hostile process can map
// and run: a copy of a real program whose section declares any size, laid
// at the end of the file and filled sparsely, so that it takes a few KB
// of disk. Readers that trust the section headers read all of it.
package hugeelf

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// Declare copies the little-endian ELF64 file src into a temporary
// directory with its section name declared size bytes long, and returns
// the copy's path; the copy still runs as src does.
func Declare(t testing.TB, src, name string, size uint64) string {
	t.Helper()
	ef, err := elf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, s := range ef.Sections {
		if s.Name == name {
			idx = i
		}
	}
	class, order := ef.Class, ef.ByteOrder
	ef.Close()
	if idx < 0 || class != elf.ELFCLASS64 || order != binary.LittleEndian {
		t.Fatalf("%s: no %s in a little-endian ELF64 file", src, name)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	// Elf64_Ehdr: e_shoff at 0x28, e_shentsize at 0x3a; Elf64_Shdr:
	// sh_offset at 24, sh_size at 32.
	shoff, shentsize := binary.LittleEndian.Uint64(b[0x28:]), uint64(binary.LittleEndian.Uint16(b[0x3a:]))
	hdr := b[shoff+uint64(idx)*shentsize:]
	at := (uint64(len(b)) + 4095) &^ 4095
	binary.LittleEndian.PutUint64(hdr[24:], at)
	binary.LittleEndian.PutUint64(hdr[32:], size)
	dst := filepath.Join(t.TempDir(), filepath.Base(src)+"-huge")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(dst, int64(at+size)); err != nil {
		t.Fatal(err)
	}
	return dst
}
