// Package addrmap names the address of a process by the mapping it lies in
// ("/usr/lib/libc.so.6+0x1f2a0", "[heap]+0x40"), so a hot cache line can
// be told apart from its neighbours without symbols. The mappings come from
// a perf.data file's MMAP records or a live process's /proc/<pid>/maps; the
// lookup itself is pure.
package addrmap

import (
	"cmp"
	"fmt"
	"slices"
)

// Mapping is one mapped range of a process.
type Mapping struct {
	Start, End uint64 // [Start, End)
	PgOff      uint64 // file offset of Start
	Name       string
}

// Maps holds processes' mappings.
type Maps struct {
	procs map[uint32][]Mapping // sorted by Start
}

// New makes an empty set.
func New() *Maps { return &Maps{procs: map[uint32][]Mapping{}} }

// Add records a mapping of pid; it replaces what it overlaps, as a new
// mmap over an old range does.
func (m *Maps) Add(pid uint32, mp Mapping) {
	if mp.End <= mp.Start {
		return
	}
	old := m.procs[pid]
	kept := old[:0:0]
	for _, o := range old {
		if o.End <= mp.Start || o.Start >= mp.End {
			kept = append(kept, o)
		}
	}
	i, _ := slices.BinarySearchFunc(kept, mp.Start, func(o Mapping, s uint64) int { return cmp.Compare(o.Start, s) })
	m.procs[pid] = slices.Insert(kept, i, mp)
}

// Set replaces pid's mappings (a fresh read of /proc/<pid>/maps).
func (m *Maps) Set(pid uint32, maps []Mapping) {
	maps = slices.Clone(maps)
	slices.SortFunc(maps, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	m.procs[pid] = maps
}

// Has says whether pid's mappings are known.
func (m *Maps) Has(pid uint32) bool { _, ok := m.procs[pid]; return ok }

// Forget drops pid.
func (m *Maps) Forget(pid uint32) { delete(m.procs, pid) }

// Find is the mapping of pid that holds addr.
func (m *Maps) Find(pid uint32, addr uint64) (Mapping, bool) {
	maps := m.procs[pid]
	i, found := slices.BinarySearchFunc(maps, addr, func(o Mapping, a uint64) int { return cmp.Compare(o.Start, a) })
	if !found {
		i--
	}
	if i < 0 || addr >= maps[i].End {
		return Mapping{}, false
	}
	return maps[i], true
}

// Name is "mapping+0xoffset" for addr in pid (offset into the file, or
// into the mapping when it has no file), or "" when no mapping holds it.
func (m *Maps) Name(pid uint32, addr uint64) string {
	mp, ok := m.Find(pid, addr)
	if !ok {
		return ""
	}
	name := mp.Name
	if name == "" {
		name = "[anon]"
	}
	return fmt.Sprintf("%s+%#x", name, addr-mp.Start+mp.PgOff)
}
