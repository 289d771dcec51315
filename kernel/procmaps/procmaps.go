// Package procmaps reads a live process's mappings from /proc/<pid>/maps
// (through prometheus/procfs) into addrmap form, so /debug/cachelines can
// name the mapping a hot line lies in.
package procmaps

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
)

// Read returns pid's mappings.
func Read(fs procfs.FS, pid int) ([]addrmap.Mapping, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	maps, err := p.ProcMaps()
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/maps: %w", pid, err)
	}
	out := make([]addrmap.Mapping, 0, len(maps))
	for _, m := range maps {
		out = append(out, addrmap.Mapping{Start: uint64(m.StartAddr), End: uint64(m.EndAddr), PgOff: uint64(m.Offset), Name: m.Pathname})
	}
	return out, nil
}

// Namer names addresses of live processes, reading each process's maps
// once per Namer (one report).
func Namer(fs procfs.FS) func(pid uint32, addr uint64) string {
	maps := addrmap.New()
	return func(pid uint32, addr uint64) string {
		if !maps.Has(pid) {
			m, _ := Read(fs, int(pid)) // a process gone is left unnamed
			maps.Set(pid, m)
		}
		return maps.Name(pid, addr)
	}
}
