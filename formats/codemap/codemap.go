// Package codemap finds, for a sampled instruction address of a process,
// the ELF file mapped there, the function around it (debug/elf symbols:
// .symtab, else .dynsym) and its bytes, so that the address sampler can
// decode the instruction and the one before it, and reports can name code
// as perf does (symbol+offset and shared object). Mappings come from a
// perf.data file's MMAP2 records or a live process's maps; the bytes from
// the file, or from the process's memory where a reader is given.
package codemap

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
)

// File is an opened mapped file; Key identifies it across processes (its
// device and inode, or its path where those are unknown).
type File interface {
	io.ReaderAt
	io.Closer
}

// Opener opens the file that pid maps under name.
type Opener func(pid uint32, name string) (f File, key string, err error)

// MemReader reads pid's memory at addr (live: /proc/PID/mem).
type MemReader func(pid uint32, addr uint64, b []byte) (int, error)

// Map resolves code addresses of processes.
//
// A file stays open while a process known to the map maps it, and a while
// after: a program run again and again (a shell loop, a cron job) finds
// its file loaded. What no process maps is closed by CloseIdle, or once
// more than MaxIdle files wait, so that a node's churn of containers does
// not keep every binary it ever ran open (and its disk space, once the
// image is removed, held).
type Map struct {
	Maps  *addrmap.Maps
	open  Opener
	mem   MemReader
	files map[string]*binary // by Opener key
	names map[fileName]*binary
	idle  []*binary // in files, mapped by no known process: oldest first
	// budget bounds what the open binaries' tables cost (estimated bytes),
	// used is what they cost, refused counts tables left unread for it.
	budget, used int64
	refused      uint64
}

// MaxIdle is how many files no process maps stay open at most.
const MaxIdle = 16

type fileName struct {
	pid  uint32
	name string
}

// binary is one ELF file's executable segments and function symbols.
type binary struct {
	f     File
	loads []elf.ProgHeader // PT_LOAD
	syms  []symbol         // functions, by address
	gotab *gosym.Table     // a Go binary's source lines, else nil
	// goRead says gotab was looked for: a Go binary with a symbol table
	// reads its pclntab (megabytes) only when a report names its code.
	goRead bool
	ef     *elf.File
	lines  []lineEntry // DWARF's line table by address, read on first use
	read   bool        // lines was read (or found absent)
	err    error
	key    string // in Map.files; "" for a file that failed to open
	refs   int    // names (process, mapped name) resolving to it
	// lim is what elf.File reads through: each table's read is bounded
	// by what was reserved for it. cost is what b's tables cost.
	lim  *limitedReaderAt
	cost int64
}

type symbol struct {
	addr, size uint64
	name       string
}

// New resolves through maps, opening files with open; mem, when set, reads
// code from the processes' memory rather than from the files.
func New(maps *addrmap.Maps, open Opener, mem MemReader) *Map {
	return &Map{Maps: maps, open: open, mem: mem, files: map[string]*binary{}, names: map[fileName]*binary{}, budget: DefaultBudget}
}

// Close closes the opened files.
func (m *Map) Close() error {
	for _, b := range m.files {
		if b.f != nil {
			b.f.Close()
		}
	}
	m.files = map[string]*binary{}
	m.names = map[fileName]*binary{}
	m.idle = nil
	m.used = 0
	return nil
}

// Forget drops what is known of pid's files (exec, exit). A file no other
// process maps waits, open, for CloseIdle.
func (m *Map) Forget(pid uint32) {
	for k, b := range m.names {
		if k.pid != pid {
			continue
		}
		delete(m.names, k)
		if b.key == "" {
			continue
		}
		if b.refs--; b.refs == 0 {
			m.idle = append(m.idle, b)
		}
	}
	for len(m.idle) > MaxIdle {
		m.closeFile(m.idle[0])
		m.idle = m.idle[1:]
	}
}

// CloseIdle closes the files no known process maps.
func (m *Map) CloseIdle() {
	for _, b := range m.idle {
		m.closeFile(b)
	}
	m.idle = nil
}

// OpenFiles is how many files are open.
func (m *Map) OpenFiles() int { return len(m.files) }

func (m *Map) closeFile(b *binary) {
	b.f.Close()
	delete(m.files, b.key)
	m.used -= b.cost
	b.cost, b.syms, b.lines, b.gotab, b.ef = 0, nil, nil, nil, nil
}

// kernelStart is where x86-64 and arm64 kernel addresses begin.
const kernelStart = 0xffff800000000000

// where locates ip: the mapping, its file, and ip's virtual address in the
// file's own address space.
func (m *Map) where(pid uint32, ip uint64) (addrmap.Mapping, *binary, uint64, memop.Reason) {
	if ip >= kernelStart {
		return addrmap.Mapping{}, nil, 0, memop.Kernel
	}
	mp, ok := m.Maps.Find(pid, ip)
	if !ok {
		return mp, nil, 0, memop.Unreadable
	}
	if mp.Name == "" || strings.HasPrefix(mp.Name, "[anon") || strings.HasPrefix(mp.Name, "//anon") || strings.HasPrefix(mp.Name, "/memfd:") {
		return mp, nil, 0, memop.JIT
	}
	if strings.HasPrefix(mp.Name, "[") { // [vdso], [vsyscall]: no file to read
		return mp, nil, 0, memop.Unreadable
	}
	b := m.binary(pid, mp.Name)
	if b.err != nil {
		return mp, b, 0, memop.Unreadable
	}
	off := ip - mp.Start + mp.PgOff
	for _, l := range b.loads {
		if off >= l.Off && off < l.Off+l.Filesz {
			return mp, b, off - l.Off + l.Vaddr, memop.Resolved
		}
	}
	return mp, b, 0, memop.Unreadable
}

func (m *Map) binary(pid uint32, name string) *binary {
	k := fileName{pid, name}
	if b := m.names[k]; b != nil {
		return b
	}
	f, key, err := m.open(pid, name)
	if err != nil {
		b := &binary{err: err}
		m.names[k] = b
		return b
	}
	if b := m.files[key]; b != nil {
		f.Close()
		if b.refs == 0 {
			m.idle = slices.DeleteFunc(m.idle, func(i *binary) bool { return i == b })
		}
		b.refs++
		m.names[k] = b
		return b
	}
	b := m.load(f)
	if b.err != nil {
		m.names[k] = b
		return b
	}
	b.key, b.refs = key, 1
	m.files[key], m.names[k] = b, b
	return b
}

// load reads an ELF file's segments and function symbols, each table
// only where the budget has room for it (reserve).
func (m *Map) load(f File) *binary {
	lim := &limitedReaderAt{r: f, left: min(headerBudget, max(m.budget-m.used, 0))}
	ef, err := elf.NewFile(lim)
	if err != nil {
		f.Close()
		return &binary{err: fmt.Errorf("not an ELF file, or headers over the symbol budget: %w", err)}
	}
	b := &binary{f: f, ef: ef, lim: lim}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			b.loads = append(b.loads, p.ProgHeader)
		}
	}
	syms, err := m.symbols(b, ".symtab", ".strtab", ef.Symbols)
	if (err != nil || len(syms) == 0) && ef.Section(".gopclntab") != nil {
		// A stripped Go binary (go build -ldflags=-s, go test, go run): its
		// pclntab has every function; a cgo one's dynamic symbols only name
		// its imports.
		m.goFuncs(b)
	} else {
		if err != nil || len(syms) == 0 {
			syms, _ = m.symbols(b, ".dynsym", ".dynstr", ef.DynamicSymbols)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				b.syms = append(b.syms, symbol{s.Value, s.Size, s.Name})
			}
		}
	}
	slices.SortFunc(b.syms, func(x, y symbol) int { return cmp.Compare(x.addr, y.addr) })
	b.syms = slices.Clip(b.syms)
	m.charge(b, symbolBytes(b.syms))
	return b
}

// symbols reads a symbol table where the budget has room for its peak.
func (m *Map) symbols(b *binary, table, strings string, read func() ([]elf.Symbol, error)) ([]elf.Symbol, error) {
	peak := symtabPeakBytes(b.ef, table, strings)
	if peak == 0 {
		return nil, elf.ErrNoSymbols
	}
	if !m.reserve(peak) {
		return nil, errOverBudget
	}
	b.lim.left = peak
	return read()
}

// goLines reads a Go binary's pclntab, which -s keeps: function bounds
// and source lines without a symbol table or DWARF; where the budget has
// room for it.
func (m *Map) goLines(b *binary) *gosym.Table {
	pcln, text := b.ef.Section(".gopclntab"), b.ef.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	peak := tablePeak * int64(pcln.Size)
	if !m.reserve(peak) {
		return nil
	}
	b.lim.left = peak
	data, err := pcln.Data()
	if err != nil {
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	b.gotab = tab
	m.charge(b, peak)
	return tab
}

func (m *Map) goFuncs(b *binary) {
	tab := m.goLines(b)
	if tab == nil {
		return
	}
	for _, fn := range tab.Funcs {
		b.syms = append(b.syms, symbol{fn.Entry, fn.End - fn.Entry, fn.Name})
	}
}

// function is the symbol holding vaddr.
func (b *binary) function(vaddr uint64) (symbol, bool) {
	i, found := slices.BinarySearchFunc(b.syms, vaddr, func(s symbol, a uint64) int { return cmp.Compare(s.addr, a) })
	if !found {
		i--
	}
	if i < 0 {
		return symbol{}, false
	}
	s := b.syms[i]
	if s.size != 0 && vaddr >= s.addr+s.size {
		return symbol{}, false
	}
	return s, true
}

// Text implements memop.Code: the bytes from the start of ip's function
// (or ip when no symbol holds it, or the function starts more than 16 KiB
// before it) to its end (at least MaxInsn bytes past ip, at most 16 KiB).
func (m *Map) Text(pid uint32, ip uint64, buf []byte) (uint64, []byte, memop.Reason) {
	mp, b, vaddr, r := m.where(pid, ip)
	if r != memop.Resolved {
		return 0, nil, r
	}
	start, after := ip, uint64(memop.MaxInsn)
	if s, ok := b.function(vaddr); ok && vaddr-s.addr <= 16<<10 {
		start = ip - (vaddr - s.addr)
		if s.size != 0 {
			after = min(max(s.addr+s.size-vaddr, after), 16<<10)
		}
	}
	if start < mp.Start {
		start, after = ip, memop.MaxInsn
	}
	n := int(ip-start) + int(min(after, mp.End-ip))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	var got int
	var err error
	if m.mem != nil {
		got, err = m.mem(pid, start, buf)
	} else {
		got, err = b.f.ReadAt(buf, int64(start-mp.Start+mp.PgOff))
	}
	if got <= int(ip-start) {
		_ = err
		return 0, nil, memop.Unreadable
	}
	return start, buf[:got], memop.Resolved
}

// Symbol is code named as perf names it.
type Symbol struct {
	Name   string // function, or "" where no symbol holds the address
	Offset uint64 // from the function's start (or the file's start)
	DSO    string // the mapped file, or [anon], [vdso], [kernel]
	Source string // file:line where the binary says (Go's pclntab)
}

func (s Symbol) String() string {
	if s.DSO == "" {
		return ""
	}
	out := fmt.Sprintf("%s+%#x", s.DSO, s.Offset)
	if s.Name != "" {
		out = fmt.Sprintf("%s+%#x (%s)", s.Name, s.Offset, s.DSO)
	}
	if s.Source != "" {
		out += " " + s.Source
	}
	return out
}

// Symbolize names ip of pid.
func (m *Map) Symbolize(pid uint32, ip uint64) Symbol {
	mp, b, vaddr, r := m.where(pid, ip)
	switch {
	case r == memop.Kernel:
		return Symbol{DSO: "[kernel]", Offset: ip}
	case mp.End == 0: // in no mapping
		return Symbol{}
	case b == nil || r != memop.Resolved:
		name := mp.Name
		if name == "" {
			name = "[anon]"
		}
		return Symbol{DSO: name, Offset: ip - mp.Start + mp.PgOff}
	}
	if s, ok := b.function(vaddr); ok {
		sym := Symbol{Name: s.name, Offset: vaddr - s.addr, DSO: mp.Name}
		sym.Source = m.source(b, vaddr)
		return sym
	}
	return Symbol{DSO: mp.Name, Offset: ip - mp.Start + mp.PgOff}
}

// lineEntry is a row of a DWARF line table: code from addr on comes from
// file:line.
type lineEntry struct {
	addr uint64
	file string
	line int
	end  bool // end_sequence: no code from here
}

// source is file:line of vaddr: from Go's pclntab, else DWARF's line
// tables (C and C++ built with -g), else "", each read on first use where
// the budget has room for it.
func (m *Map) source(b *binary, vaddr uint64) string {
	if !b.goRead {
		b.goRead = true
		if b.gotab == nil {
			m.goLines(b)
		}
	}
	if b.gotab != nil {
		if file, line, _ := b.gotab.PCToLine(vaddr); file != "" {
			return fmt.Sprintf("%s:%d", file, line)
		}
		return ""
	}
	return m.dwarfSource(b, vaddr)
}

func (m *Map) dwarfSource(b *binary, vaddr uint64) string {
	if !b.read {
		b.read = true
		if peak := dwarfPeakBytes(b.ef); peak > 0 && m.reserve(peak) {
			b.lim.left = peak
			b.lines = slices.Clip(dwarfLines(b.ef))
			m.charge(b, lineBytes(b.lines))
		}
	}
	i, found := slices.BinarySearchFunc(b.lines, vaddr, func(e lineEntry, a uint64) int { return cmp.Compare(e.addr, a) })
	if !found {
		i--
	}
	if i < 0 || b.lines[i].end {
		return ""
	}
	return fmt.Sprintf("%s:%d", b.lines[i].file, b.lines[i].line)
}

// dwarfLines reads every compilation unit's line table, by address.
func dwarfLines(ef *elf.File) []lineEntry {
	d, err := ef.DWARF()
	if err != nil {
		return nil
	}
	var out []lineEntry
	r := d.Reader()
	// Each entry takes a byte of .debug_info at least, and the reader
	// moves forward: a file whose sibling offsets lead it round (found
	// by FuzzBinary) ends the walk rather than holding the decoder.
	left, last := int64(1), dwarf.Offset(0)
	if s := ef.Section(".debug_info"); s != nil {
		left += int64(s.Size)
	}
	lineBytes := int64(1)
	if s := ef.Section(".debug_line"); s != nil {
		lineBytes += int64(s.Size)
	}
	for ; left > 0; left-- {
		cu, err := r.Next()
		if err != nil || cu == nil || (cu.Offset <= last && last != 0) {
			break
		}
		last = cu.Offset
		if cu.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		lr, err := d.LineReader(cu)
		if err == nil && lr != nil {
			var e dwarf.LineEntry
			// A row takes an opcode byte of .debug_line at least.
			for rows := lineBytes; rows > 0 && lr.Next(&e) == nil; rows-- {
				le := lineEntry{addr: e.Address, line: e.Line, end: e.EndSequence}
				if e.File != nil {
					le.file = e.File.Name
				}
				out = append(out, le)
			}
		}
		r.SkipChildren()
	}
	slices.SortStableFunc(out, func(x, y lineEntry) int { return cmp.Compare(x.addr, y.addr) })
	return out
}
