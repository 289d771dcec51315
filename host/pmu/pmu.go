// Package pmu discovers the performance monitoring units the kernel exposes under
// <sysfs>/bus/event_source/devices: each PMU's perf type number, the bit layout of
// its config words (format/*), its named event aliases (events/*), its capabilities
// (caps/*) and the CPUs it covers. It only reads files, so it is tested on fixture
// trees; opening events is kernel/perf's job.
package pmu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// Perf type numbers fixed by the kernel ABI (include/uapi/linux/perf_event.h).
const (
	TypeHardware   = 0
	TypeSoftware   = 1
	TypeTracepoint = 2
	TypeHWCache    = 3
	TypeRaw        = 4
	TypeBreakpoint = 5
)

// PMU is one directory of /sys/bus/event_source/devices.
type PMU struct {
	Name    string
	Type    uint32
	Formats map[string]Format // term name -> where its bits go
	Aliases map[string]Alias  // event alias name -> terms
	Caps    map[string]string // caps/* file contents, trimmed
	// CPUs lists the CPUs this PMU counts on (the "cpus" file of hybrid and Arm
	// core PMUs); nil means every CPU.
	CPUs []int
	// CPUMask lists the CPUs on which events of this PMU must be opened (the
	// "cpumask" file of uncore PMUs: one CPU per socket); nil when absent.
	CPUMask []int
	// Identifier is the "identifier" file of a system PMU (Arm's CMN,
	// NXP's DDR controllers): which part it is, as perf's event lists
	// match it ("Compat"); empty when absent.
	Identifier string
}

// Alias is a named event from events/NAME, with its optional .scale and .unit.
type Alias struct {
	Name  string
	Terms string  // e.g. "event=0x3c,umask=0x00"
	Scale float64 // 1 unless NAME.scale says otherwise
	Unit  string
	// Snapshot is NAME.snapshot: the event reads a current value (a
	// temperature), not a count that grows.
	Snapshot bool
}

// IsCore reports whether p counts CPU core events (as opposed to uncore, software,
// tracepoint, breakpoint or other PMUs): x86 "cpu", hybrid "cpu_core"/"cpu_atom",
// and the Arm "armv8_*"/"armv9_*" PMUs.
func (p *PMU) IsCore() bool {
	switch {
	case p.Name == "cpu", p.Name == "cpu_core", p.Name == "cpu_atom":
		return true
	case strings.HasPrefix(p.Name, "armv8_"), strings.HasPrefix(p.Name, "armv9_"):
		return true
	}
	return false
}

// TermNames lists what a pmu/term=value/ spec may name on this PMU, sorted: the
// format fields and the generic config words.
func (p *PMU) TermNames() []string {
	names := []string{"config", "config1", "config2", "name"}
	for n := range p.Formats {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AliasNames lists the PMU's named events, sorted.
func (p *PMU) AliasNames() []string {
	names := make([]string, 0, len(p.Aliases))
	for n := range p.Aliases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Discover reads every PMU under sysfsRoot (normally /sys, or /host/sys in a
// container). PMUs are returned sorted by name. A PMU directory that cannot be
// parsed is reported in the joined error while the others are still returned.
func Discover(sysfsRoot string) ([]*PMU, error) {
	dir := filepath.Join(sysfsRoot, "bus", "event_source", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing PMUs: %w", err)
	}
	var pmus []*PMU
	var errs []error
	for _, e := range entries {
		p, err := Read(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pmus = append(pmus, p)
	}
	sort.Slice(pmus, func(i, j int) bool { return pmus[i].Name < pmus[j].Name })
	return pmus, errors.Join(errs...)
}

// Read parses one PMU directory.
func Read(dir string) (*PMU, error) {
	name := filepath.Base(dir)
	p := &PMU{Name: name, Formats: map[string]Format{}, Aliases: map[string]Alias{}, Caps: map[string]string{}}
	typ, err := readTrim(filepath.Join(dir, "type"))
	if err != nil {
		return nil, fmt.Errorf("PMU %s: %w", name, err)
	}
	t, err := strconv.ParseUint(typ, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("PMU %s: type %q is not a number", name, typ)
	}
	p.Type = uint32(t)

	if err := eachFile(filepath.Join(dir, "format"), func(n, v string) error {
		f, err := ParseFormat(v)
		if err != nil {
			return fmt.Errorf("PMU %s: format/%s: %w", name, n, err)
		}
		p.Formats[n] = f
		return nil
	}); err != nil {
		return nil, err
	}
	if err := readAliases(p, filepath.Join(dir, "events")); err != nil {
		return nil, err
	}
	if err := eachFile(filepath.Join(dir, "caps"), func(n, v string) error {
		p.Caps[n] = v
		return nil
	}); err != nil {
		return nil, err
	}
	if p.CPUs, err = readCPUList(filepath.Join(dir, "cpus")); err != nil {
		return nil, fmt.Errorf("PMU %s: %w", name, err)
	}
	if p.CPUMask, err = readCPUList(filepath.Join(dir, "cpumask")); err != nil {
		return nil, fmt.Errorf("PMU %s: %w", name, err)
	}
	if p.Identifier, err = readTrim(filepath.Join(dir, "identifier")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("PMU %s: %w", name, err)
	}
	return p, nil
}

func readAliases(p *PMU, dir string) error {
	files := map[string]string{}
	if err := eachFile(dir, func(n, v string) error { files[n] = v; return nil }); err != nil {
		return err
	}
	for n, v := range files {
		if strings.Contains(n, ".") { // NAME.scale, NAME.unit, NAME.per-pkg, NAME.snapshot
			continue
		}
		a := Alias{Name: n, Terms: v, Scale: 1, Unit: files[n+".unit"], Snapshot: files[n+".snapshot"] == "1"}
		if s, ok := files[n+".scale"]; ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("PMU %s: events/%s.scale: %q is not a number", p.Name, n, s)
			}
			a.Scale = f
		}
		p.Aliases[n] = a
	}
	return nil
}

// eachFile calls fn with every regular file's name and trimmed content in dir;
// a missing dir is not an error (most PMUs lack caps/ or events/).
func eachFile(dir string, fn func(name, value string) error) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		v, err := readTrim(filepath.Join(dir, e.Name()))
		if err != nil {
			// Some sysfs attributes are write-only or vanish; skip what cannot be read.
			continue
		}
		if err := fn(e.Name(), v); err != nil {
			return err
		}
	}
	return nil
}

func readCPUList(path string) ([]int, error) {
	s, err := readTrim(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cpus, err := cpuset.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return cpus, nil
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
