package perfsample

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/codemap"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/procmaps"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
)

// Processes reads what the sampled processes map, for the address
// sampler's decoder (analysis/locality/feed): their mapped files through
// their root (their container's filesystem), their memory
// (/proc/PID/mem; CAP_SYS_PTRACE), their mappings and names. Every open and
// read is bounded in time: a file on a stalled mount holds a read in the
// kernel, and the process controls what its names are.
type Processes struct {
	proc     string
	fs       procfs.FS
	deadline *safeopen.Deadline
}

// How long a read of what a process maps may take, and how many reads
// given up on the kernel may hold before no code is read at all until
// they return.
const (
	readBudget   = time.Second
	maxAbandoned = 16
)

// NewProcesses reads processes under proc (/proc).
func NewProcesses(proc string) (*Processes, error) {
	fs, err := procfs.NewFS(proc)
	if err != nil {
		return nil, fmt.Errorf("address sampler: %w", err)
	}
	return &Processes{proc: proc, fs: fs, deadline: &safeopen.Deadline{Budget: readBudget, MaxAbandoned: maxAbandoned}}, nil
}

// Open opens the file pid maps as name, through the process's root, keyed
// by device and inode so that one file mapped by many processes is read
// once. Only a regular file, and never blocking (safeopen.InRoot): the
// process controls what the name is now.
func (p *Processes) Open(pid uint32, name string) (codemap.File, string, error) {
	f, err := p.deadline.Open(func() (*os.File, error) {
		return safeopen.InRoot(fmt.Sprintf("%s/%d/root", p.proc, pid), name)
	})
	if err != nil {
		return nil, "", err
	}
	key := name
	if fi, err := f.Stat(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			key = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
		}
	}
	return p.deadline.Timed(f), key, nil
}

// ReadMem reads pid's memory at addr: a page backed by a file on a
// stalled mount holds the read in the kernel.
func (p *Processes) ReadMem(pid uint32, addr uint64, b []byte) (int, error) {
	return p.deadline.ReadAt(func() (io.ReaderAt, io.Closer, error) {
		f, err := os.Open(fmt.Sprintf("%s/%d/mem", p.proc, pid))
		return f, f, err
	}, b, int64(addr))
}

// Maps are pid's mappings (/proc/PID/maps).
func (p *Processes) Maps(pid uint32) ([]addrmap.Mapping, error) { return procmaps.Read(p.fs, int(pid)) }

// Comm is pid's name.
func (p *Processes) Comm(pid uint32) (string, error) {
	proc, err := p.fs.Proc(int(pid))
	if err != nil {
		return "", err
	}
	return proc.Comm()
}

// TimedOut is how many opens and reads were given up on.
func (p *Processes) TimedOut() uint64 { return p.deadline.TimedOut() }

// MonotonicNow is CLOCK_MONOTONIC in ns, the samples' and traps' clock;
// false where it cannot be read.
func MonotonicNow() (uint64, bool) { return perf.MonotonicNow() }
