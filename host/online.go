package host

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
)

// OnlineCPUs reads <sysfs>/devices/system/cpu/online.
func OnlineCPUs(sysfs string) ([]int, error) {
	p := filepath.Join(sysfs, "devices", "system", "cpu", "online")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading online CPUs: %w", err)
	}
	cpus, err := cpuset.Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return cpus, nil
}

// OnlineCPUsReader re-reads the online CPU list once per read cycle through one
// open file (pread at offset 0 makes sysfs regenerate it), and parses it only
// when it changed. Its result must not be modified.
type OnlineCPUsReader struct {
	mu   sync.Mutex // one reader serves the engine and the sampler
	path string
	f    *os.File
	buf  []byte
	last string
	cpus []int
}

// NewOnlineCPUsReader reads <sysfs>/devices/system/cpu/online.
func NewOnlineCPUsReader(sysfs string) *OnlineCPUsReader {
	return &OnlineCPUsReader{path: filepath.Join(sysfs, "devices", "system", "cpu", "online"), buf: make([]byte, 4096)}
}

// Read returns the online CPUs (a slice the caller must not change). It is
// safe for concurrent use.
func (r *OnlineCPUsReader) Read() ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		f, err := os.Open(r.path)
		if err != nil {
			return nil, fmt.Errorf("reading online CPUs: %w", err)
		}
		r.f = f
	}
	n, err := r.f.ReadAt(r.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		r.f.Close()
		r.f = nil
		return nil, fmt.Errorf("reading %s: %w", r.path, err)
	}
	if r.cpus != nil && string(r.buf[:n]) == r.last {
		return r.cpus, nil
	}
	cpus, err := cpuset.Parse(string(r.buf[:n]))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path, err)
	}
	r.last, r.cpus = string(r.buf[:n]), cpus
	return cpus, nil
}

// Close releases the file.
func (r *OnlineCPUsReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// SMTActive reads <sysfs>/devices/system/cpu/smt/active: whether sibling
// hyper-threads are online.
func SMTActive(sysfs string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(sysfs, "devices", "system", "cpu", "smt", "active"))
	if err != nil {
		return false, fmt.Errorf("reading SMT state: %w", err)
	}
	return strings.TrimSpace(string(b)) == "1", nil
}
