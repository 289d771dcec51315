package codemap

import (
	"debug/elf"
	"errors"
	"io"
	"strings"
)

// DefaultBudget is what the symbol tables, line tables and Go pclntabs of
// the open binaries may cost together, as estimated here, by default.
const DefaultBudget = 64 << 20

// What reading a binary's tables costs at its peak, per byte of the
// section as the file declares it: an ELF64 symbol of 24 bytes becomes a
// debug/elf Symbol (about 80 bytes) before it becomes ours, and its string
// table is copied once more; DWARF and pclntab are read whole and parsed.
const (
	symtabPeak = 1 + 80/24
	tablePeak  = 2
	// headerBudget bounds what elf.NewFile reads of a file's headers
	// (65,535 section headers are 4 MiB).
	headerBudget = 8 << 20
)

// errOverBudget: a table that would cost more than the budget has left.
var errOverBudget = errors.New("over the symbol budget")

// SetBudget bounds what the open binaries' tables cost together (bytes,
// as estimated): a table that would pass it is not read, once the binaries
// no process maps are closed; the binary is still decoded, without it.
func (m *Map) SetBudget(n int64) { m.budget = n }

// Bytes is what the open binaries' tables cost, as estimated: their
// symbols, line tables and Go pclntabs.
func (m *Map) Bytes() int64 { return m.used }

// Refused is how many tables were left unread for the budget (a process
// can declare a symbol table of any size, sparse on disk).
func (m *Map) Refused() uint64 { return m.refused }

// reserve makes room for a table of the given peak cost, closing the
// binaries no process maps if it must (the binary being read is mapped,
// so never among them); false when even then it does not fit, which is
// counted.
func (m *Map) reserve(peak int64) bool {
	for m.used+peak > m.budget && len(m.idle) > 0 {
		m.closeFile(m.idle[0])
		m.idle = m.idle[1:]
	}
	if m.used+peak > m.budget {
		m.refused++
		return false
	}
	return true
}

// charge adds n bytes to b's cost and the map's.
func (m *Map) charge(b *binary, n int64) {
	b.cost += n
	m.used += n
}

// limitedReaderAt reads at most left bytes in all, so that no header or
// table elf.File reads is larger than what was reserved for it, whatever
// its header says.
type limitedReaderAt struct {
	r    io.ReaderAt
	left int64
}

func (l *limitedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errOverBudget
	}
	n, err := l.r.ReadAt(p, off)
	l.left -= int64(n)
	return n, err
}

// sectionSize is what a section holds as the file declares it
// (uncompressed), 0 for none.
func sectionSize(ef *elf.File, name string) int64 {
	if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
		return int64(s.Size)
	}
	return 0
}

// symtabPeakBytes is what reading a symbol table and its strings costs at
// its peak (.symtab with .strtab, or .dynsym with .dynstr).
func symtabPeakBytes(ef *elf.File, table, strings string) int64 {
	return symtabPeak*sectionSize(ef, table) + tablePeak*sectionSize(ef, strings)
}

// dwarfPeakBytes is what reading the DWARF sections costs at its peak.
func dwarfPeakBytes(ef *elf.File) int64 {
	var n int64
	for _, s := range ef.Sections {
		if strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			n += tablePeak * int64(s.Size)
		}
	}
	return n
}

// symbolBytes is what syms keep.
func symbolBytes(syms []symbol) int64 {
	n := int64(cap(syms)) * 40
	for _, s := range syms {
		n += int64(len(s.name))
	}
	return n
}

// lineBytes is what a line table keeps (file names are shared strings).
func lineBytes(lines []lineEntry) int64 { return int64(cap(lines)) * 48 }
