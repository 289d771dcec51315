// Package cgroupfiles reads what a cgroup's directory says of its CPU
// throttling (cpu.stat) and its pressure stalls (cpu.pressure,
// memory.pressure, io.pressure), for the run-queue collector to set beside
// its waits. A cgroup's directory may be a tenant's delegated subtree: a
// file is opened without following a link, read up to a bound, and parsed
// by formats/cgroupstat, which names what it refuses.
package cgroupfiles

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/pmu-exporter/pmu_exporter/formats/cgroupstat"
)

// maxFile bounds what one file read takes: the files are a few lines.
const maxFile = 64 << 10

// Resources are the PSI files a cgroup v2 directory has.
var Resources = []string{"cpu", "memory", "io"}

// open opens name in dir, refusing a symbolic link.
func open(dir, name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// CPU reads dir's cpu.stat (cgroup v2, or a v1 cpu controller's
// directory).
func CPU(dir string) (cgroupstat.CPU, error) {
	f, err := open(dir, "cpu.stat")
	if err != nil {
		return cgroupstat.CPU{}, err
	}
	defer f.Close()
	c, err := cgroupstat.ParseCPU(io.LimitReader(f, maxFile))
	if err != nil {
		return c, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return c, nil
}

// Pressure reads dir's PSI file of resource (cpu, memory, io).
func Pressure(dir, resource string) (cgroupstat.Pressure, error) {
	f, err := open(dir, resource+".pressure")
	if err != nil {
		return cgroupstat.Pressure{}, err
	}
	defer f.Close()
	p, err := cgroupstat.ParsePressure(io.LimitReader(f, maxFile))
	if err != nil {
		return p, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return p, nil
}
