// Package schedbpf measures each cgroup's run-queue wait and who held the
// CPU meanwhile, with the eBPF program in bpf/sched_wait.bpf.c: at every
// switch out of a task it takes the growth of the kernel's own run_delay
// (/proc/PID/schedstat) since the task's previous switch out, gives it to
// the task's cgroup as one wait (a count, a sum, a histogram bucket), and
// lays it on the CPU's recent segments to charge the cgroups that ran
// meanwhile. This package only talks to the kernel (load, attach, read
// maps); what the waits mean is decided elsewhere.
package schedbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// Buckets are the wait histogram's buckets (the program's BUCKETS): bucket
// k < Buckets-1 holds the waits of at most 1 µs × 4^k beyond the one
// before, the last those beyond every bound.
const Buckets = 12

// None is the holder of the part of a wait no segment of the CPU covers:
// the CPU idle after a wakeup, or more segments back than it keeps.
const None = 0

// Wait is one cgroup's waits, summed over CPUs: how many, their sum in ns,
// and how many in each bucket (not cumulative).
type Wait struct {
	Count, Sum uint64
	Bucket     [Buckets]uint64
}

// Pair is a victim cgroup that waited while holder ran on its CPU.
type Pair struct {
	Victim, Holder uint64
}

// Stats are the program's own counters, summed over CPUs: waits and pairs
// dropped because their map was full, tasks first seen with a run_delay
// from before the load (their wait then not charged), and tasks whose
// storage the kernel refused; and the program's runs, with their run time
// where an operator turned the kernel's bpf_stats on.
type Stats struct {
	WaitsFull, PairsFull, FirstSeen, NoStorage uint64
	Program                                    model.BPFProgram
}

// Options sizes the maps.
type Options struct {
	MaxCgroups int // cgroups whose waits are held at once
	MaxPairs   int // (victim, holder) pairs held at once
	// PerfEventV1: cgroups are named by v1's perf_event hierarchy (as the
	// cgroup attribution names them), else by cgroup v2.
	PerfEventV1 bool
}

// Waits is the loaded, attached program.
type Waits struct {
	objs   waitObjects
	link   link.Link
	cpus   int
	wait   []waitWait // per-CPU scratch
	pair   []uint64
	statsV []uint64
}

// Load loads the program and attaches it to sched_switch. It needs CAP_BPF
// and CAP_PERFMON (or root), and a kernel with BTF, task storage (5.11)
// and schedstats' fields (CONFIG_SCHED_INFO).
func Load(opts Options) (*Waits, error) {
	if opts.MaxCgroups < 1 || opts.MaxPairs < 1 {
		return nil, fmt.Errorf("run-queue wait maps of %d cgroups and %d pairs: at least 1 each", opts.MaxCgroups, opts.MaxPairs)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible CPUs: %w", err)
	}
	spec, err := loadWait()
	if err != nil {
		return nil, fmt.Errorf("load the embedded BPF object: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, fmt.Errorf("CLOCK_MONOTONIC: %w", err)
	}
	v1 := uint32(0)
	if opts.PerfEventV1 {
		v1 = 1
	}
	if err := spec.Variables["loaded_at"].Set(uint64(ts.Nano())); err != nil {
		return nil, fmt.Errorf("set loaded_at: %w", err)
	}
	if err := spec.Variables["perf_event_v1"].Set(v1); err != nil {
		return nil, fmt.Errorf("set perf_event_v1: %w", err)
	}
	spec.Maps["waits"].MaxEntries = uint32(opts.MaxCgroups)
	spec.Maps["pairs"].MaxEntries = uint32(opts.MaxPairs)
	spec.Maps["rings"].MaxEntries = uint32(cpus)
	w := &Waits{cpus: cpus, wait: make([]waitWait, cpus), pair: make([]uint64, cpus), statsV: make([]uint64, cpus)}
	if err := spec.LoadAndAssign(&w.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel's verifier rejected the run-queue wait program: %+v", ve)
		}
		return nil, fmt.Errorf("load the run-queue wait program: %w", err)
	}
	w.link, err = link.AttachTracing(link.TracingOptions{Program: w.objs.OnSwitch})
	if err != nil {
		w.objs.Close()
		return nil, fmt.Errorf("attach the run-queue wait program to the sched_switch tracepoint: %w", err)
	}
	return w, nil
}

// Waits calls fn with each cgroup's waits, summed over CPUs.
func (w *Waits) Waits(fn func(id uint64, wait Wait)) error {
	var id uint64
	it := w.objs.Waits.Iterate()
	for it.Next(&id, &w.wait) {
		var sum Wait
		for _, v := range w.wait {
			sum.Count += v.Count
			sum.Sum += v.Sum
			for k := range sum.Bucket {
				sum.Bucket[k] += v.Bucket[k]
			}
		}
		fn(id, sum)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the run-queue waits: %w", err)
	}
	return nil
}

// Pairs calls fn with each (victim, holder) pair's wait in ns, summed over
// CPUs.
func (w *Waits) Pairs(fn func(p Pair, ns uint64)) error {
	var k waitPair
	it := w.objs.Pairs.Iterate()
	for it.Next(&k, &w.pair) {
		var ns uint64
		for _, v := range w.pair {
			ns += v
		}
		fn(Pair{Victim: k.Victim, Holder: k.Holder}, ns)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the run-queue wait pairs: %w", err)
	}
	return nil
}

// Stats reads the program's own counters.
func (w *Waits) Stats() (Stats, error) {
	s := Stats{Program: model.BPFProgram{Name: "sched_switch_wait"}}
	for i, dst := range []*uint64{&s.Program.Runs, &s.WaitsFull, &s.PairsFull, &s.FirstSeen, &s.NoStorage} {
		if err := w.objs.Stats.Lookup(uint32(i), &w.statsV); err != nil {
			return s, fmt.Errorf("read the run-queue wait program's stat %d: %w", i, err)
		}
		for _, v := range w.statsV {
			*dst += v
		}
	}
	if perf.BPFStatsEnabled() {
		st, err := w.objs.OnSwitch.Stats()
		if err != nil {
			return s, fmt.Errorf("read the kernel's stats of the run-queue wait program: %w", err)
		}
		s.Program.RunSeconds = st.Runtime.Seconds()
	}
	return s, nil
}

// Program is the program at sched_switch (for the kernel's bpf_stats).
func (w *Waits) Program() *ebpf.Program { return w.objs.OnSwitch }

// Close detaches the program and frees its maps.
func (w *Waits) Close() error {
	return errors.Join(w.link.Close(), w.objs.Close())
}
