// Package cgroupbpf attributes the counting core's per-CPU events to cgroups in
// the kernel, with the eBPF program in bpf/cgroup_count.bpf.c: on every switch
// between tasks of different cgroups a CPU credits what its events counted
// since its previous switch to the outgoing task's own cgroup, and records a
// cgroup's ancestors when it first credits it (Ancestors): whoever reads sums
// the ancestors, which the kernel does not do at every switch. File
// descriptors stay CPUs x events, whatever the number of cgroups: the program
// reads the counting core's own fds. This package only talks to the kernel
// (load, attach, fill and read maps); what the counts mean is decided elsewhere.
package cgroupbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// MaxEvents is how many events can be attributed (the program's MAX_EVENTS). On
// a hybrid host each core type has this many.
const MaxEvents = 32

// MaxDepth is the deepest ancestor level the program records (MAX_DEPTH - 1).
const MaxDepth = 15

// swCgroupSwitches is PERF_COUNT_SW_CGROUP_SWITCHES (Linux 5.13), which x/sys
// does not name.
const swCgroupSwitches = 11

// Options sizes the program and its maps.
type Options struct {
	Events     int // events attributed, 1..MaxEvents
	Depth      int // ancestor levels 1..Depth are recorded for each cgroup (Ancestors)
	MaxCgroups int // cgroups held at once; beyond it credits are dropped and counted
	// PerfEventV1 says the perf_event controller is on a cgroup v1 hierarchy:
	// ids are then that hierarchy's (cgroup-switches compares its cgroups).
	PerfEventV1 bool
}

// Reading is one event's accumulated counts.
type Reading struct {
	Counter, Enabled, Running uint64
}

// Unattributed is the cgroup id under which the program files counts it cannot
// give to one cgroup: those of a span in which the kernel skipped the program
// for a switch.
const Unattributed = 0

// Stats are the program's own counters, summed over CPUs (model.SwitchStats).
type Stats = model.SwitchStats

// Counter is the loaded program and its maps.
type Counter struct {
	objs     counterObjects
	events   int
	cpus     int           // possible CPUs: the per-CPU value count
	arrays   []*ebpf.Map   // per event, indexed by CPU
	switches map[int]int   // CPU -> cgroup-switches fd carrying the program
	switch_  link.Link     // the credit at each switch between cgroups and into idle (sched_switch)
	idleExit link.Link     // the credit at each exit from an idle state (cpu_idle)
	moves    link.Link     // the span of a task that moves itself between cgroups goes to Unattributed
	values   []cgroupValue // scratch for reads, one per possible CPU
	keys     []uint64      // scratch for batched reads: the cgroup ids
	batch    []Reading     // and their readings, events per CPU, cpus per cgroup
	noBatch  bool          // the kernel cannot read the map in batches
}

// Load loads the program with its maps sized for opts. It needs CAP_BPF and
// CAP_PERFMON (or root).
func Load(opts Options) (*Counter, error) {
	if opts.Events < 1 || opts.Events > MaxEvents {
		return nil, fmt.Errorf("cgroup attribution of %d events: between 1 and %d can be attributed", opts.Events, MaxEvents)
	}
	if opts.Depth < 0 || opts.Depth > MaxDepth {
		return nil, fmt.Errorf("cgroup depth %d: between 0 and %d", opts.Depth, MaxDepth)
	}
	if opts.MaxCgroups < 1 {
		return nil, fmt.Errorf("cgroup map of %d entries", opts.MaxCgroups)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible CPUs: %w", err)
	}
	spec, err := loadCounter()
	if err != nil {
		return nil, fmt.Errorf("load the embedded BPF object: %w", err)
	}
	v1 := uint32(0)
	if opts.PerfEventV1 {
		v1 = 1
	}
	for name, v := range map[string]uint32{"num_events": uint32(opts.Events), "max_depth": uint32(opts.Depth), "perf_event_v1": v1} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	spec.Maps["cgroups"].MaxEntries = uint32(opts.MaxCgroups)
	spec.Maps["cgroups"].ValueSize = uint32(opts.Events) * uint32(unsafe.Sizeof(Reading{}))
	spec.Maps["cgroups"].Value = nil // the BTF type is MAX_EVENTS readings; the map holds Events
	spec.Maps["ancestors"].MaxEntries = uint32(opts.MaxCgroups)
	spec.Maps["ancestors"].ValueSize = uint32(opts.Depth+1) * 8 // levels 0 (unused) to Depth
	spec.Maps["ancestors"].Value = nil
	spec.Maps["seen"].MaxEntries = uint32(cpus)
	spec.Maps["previous"].MaxEntries = uint32(cpus) * MaxEvents
	c := &Counter{events: opts.Events, cpus: cpus, switches: map[int]int{}, values: make([]cgroupValue, cpus)}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel's verifier rejected the cgroup program: %+v", ve)
		}
		return nil, fmt.Errorf("load the cgroup program: %w", err)
	}
	// BTF tracepoints (tp_btf): the tracepoint each is on is in its spec.
	c.switch_, err = link.AttachTracing(link.TracingOptions{Program: c.objs.OnSwitch})
	if err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("attach the cgroup switch credit to the sched_switch tracepoint: %w", err)
	}
	c.idleExit, err = link.AttachTracing(link.TracingOptions{Program: c.objs.OnIdleExit})
	if err != nil {
		c.switch_.Close()
		c.objs.Close()
		return nil, fmt.Errorf("attach the idle-exit credit to the cpu_idle tracepoint: %w", err)
	}
	c.moves, err = link.AttachTracing(link.TracingOptions{Program: c.objs.OnCgroupAttach})
	if err != nil {
		c.switch_.Close()
		c.idleExit.Close()
		c.objs.Close()
		return nil, fmt.Errorf("attach the cgroup move credit to the cgroup_attach_task tracepoint: %w", err)
	}
	c.arrays = []*ebpf.Map{c.objs.Events0, c.objs.Events1, c.objs.Events2, c.objs.Events3, c.objs.Events4, c.objs.Events5, c.objs.Events6, c.objs.Events7, c.objs.Events8, c.objs.Events9, c.objs.Events10, c.objs.Events11, c.objs.Events12, c.objs.Events13, c.objs.Events14, c.objs.Events15, c.objs.Events16, c.objs.Events17, c.objs.Events18, c.objs.Events19, c.objs.Events20, c.objs.Events21, c.objs.Events22, c.objs.Events23, c.objs.Events24, c.objs.Events25, c.objs.Events26, c.objs.Events27, c.objs.Events28, c.objs.Events29, c.objs.Events30, c.objs.Events31}[:opts.Events]
	return c, nil
}

// Attach starts crediting on cpu: it opens the CPU's cgroup-switches
// software event, which the program checks its own credits against (and
// without which it credits nothing there).
func (c *Counter) Attach(cpu int) error {
	if _, ok := c.switches[cpu]; ok {
		return nil
	}
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: swCgroupSwitches,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   unix.PerfBitDisabled,
	}
	fd, err := perf.OpenFD(&attr, -1, cpu, -1, 0)
	if err != nil {
		return fmt.Errorf("open cgroup-switches on CPU %d: %w", cpu, err)
	}
	// A fresh event counts from 0 (struct seen_state): reset before the
	// program can read the event there (it credits nothing on a CPU without
	// one). Only this CPU's element is written: the program may be crediting
	// on the others.
	if err := c.objs.Seen.Put(uint32(cpu), make([]byte, c.objs.Seen.ValueSize())); err != nil {
		unix.Close(fd)
		return fmt.Errorf("reset the switch count of CPU %d: %w", cpu, err)
	}
	if err := c.objs.Switches.Put(uint32(cpu), uint32(fd)); err != nil {
		unix.Close(fd)
		return fmt.Errorf("place cgroup-switches of CPU %d: %w", cpu, err)
	}
	if err := perf.Enable(fd); err != nil {
		unix.Close(fd)
		return fmt.Errorf("enable cgroup-switches on CPU %d: %w", cpu, err)
	}
	c.switches[cpu] = fd
	return nil
}

// Detach closes cpu's cgroup-switches event (CPU going offline).
func (c *Counter) Detach(cpu int) {
	if fd, ok := c.switches[cpu]; ok {
		c.objs.Switches.Delete(uint32(cpu))
		unix.Close(fd)
		delete(c.switches, cpu)
	}
}

// Attached lists the CPUs with the program attached.
func (c *Counter) Attached() []int {
	var cpus []int
	for cpu := range c.switches {
		cpus = append(cpus, cpu)
	}
	slices.Sort(cpus)
	return cpus
}

func (c *Counter) check(event, cpu int) error {
	if event < 0 || event >= c.events || cpu < 0 || cpu >= c.cpus {
		return fmt.Errorf("event %d on CPU %d: outside %d events x %d CPUs", event, cpu, c.events, c.cpus)
	}
	return nil
}

// How says how the program reads an event at each credit. The zero value
// reads its count with its own enabled and running times: right for any
// event, and the only way for the first event of a perf group.
type How struct {
	// TimesFrom, when Shared, is the number of an event of the same perf
	// group, lower than this one's, whose enabled and running times this
	// event shares: members of a group are scheduled in and out together.
	// The program reads it first, and then this event's count alone, which
	// spares the clock reads that times cost (a few tens of ns each in a
	// guest).
	TimesFrom int
	Shared    bool
	// TaskClock says the event is task-clock, whose count is its running
	// time (both advance with its context's time while it runs): with
	// Shared, it is not read at all.
	TaskClock bool
}

// slot is the program's struct slot: an event's reading at the CPU's
// previous credit and how it is read.
type slot struct {
	Reading
	How, From uint32
}

// The program's read modes (enum in the program).
const (
	readValue = iota
	readCounter
	readTaskClock
)

// SetEvent makes fd, a counting event open on cpu, the program's event number
// event there, read as how says, in place of any fd placed before. The
// program's previous reading there is reset while no fd is placed (the
// program credits nothing for an event it cannot read), so the old fd's
// counts are not credited again and the first credit takes the new fd's
// count from its opening: place an fd as soon as it is opened.
func (c *Counter) SetEvent(event, cpu, fd int, how How) error {
	if err := c.check(event, cpu); err != nil {
		return err
	}
	if how.Shared && (how.TimesFrom < 0 || how.TimesFrom >= event) {
		return fmt.Errorf("event %d on CPU %d: times shared with event %d, which the program does not read before it", event, cpu, how.TimesFrom)
	}
	if err := c.ClearEvent(event, cpu); err != nil {
		return err
	}
	if err := c.resetPrevious(event, cpu, how); err != nil {
		return err
	}
	if err := c.arrays[event].Put(uint32(cpu), uint32(fd)); err != nil {
		return fmt.Errorf("place event %d on CPU %d: %w", event, cpu, err)
	}
	return nil
}

// ClearEvent removes event number event on cpu; call it before the fd is
// closed, or the array keeps the event alive.
func (c *Counter) ClearEvent(event, cpu int) error {
	if err := c.check(event, cpu); err != nil {
		return err
	}
	if err := c.arrays[event].Delete(uint32(cpu)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove event %d on CPU %d: %w", event, cpu, err)
	}
	return nil
}

// resetPrevious zeroes the program's last reading of event on cpu, so that a new
// fd's first reading is not compared with the old fd's, and sets how it is
// read. It writes that one element: the program may be crediting on other
// CPUs meanwhile.
func (c *Counter) resetPrevious(event, cpu int, how How) error {
	s := slot{How: readValue}
	if how.Shared {
		s.How, s.From = readCounter, uint32(how.TimesFrom)
		if how.TaskClock {
			s.How = readTaskClock
		}
	}
	if err := c.objs.Previous.Put(uint32(cpu*MaxEvents+event), s); err != nil {
		return fmt.Errorf("reset previous reading of event %d on CPU %d: %w", event, cpu, err)
	}
	return nil
}

// CreditNow runs the program on cpu, crediting what that CPU counted since its
// last switch to the cgroup running there now. Call it on every CPU before Read.
func (c *Counter) CreditNow(cpu int) error {
	if _, err := c.objs.CreditNow.Run(&ebpf.RunOptions{CPU: uint32(cpu), Flags: unix.BPF_F_TEST_RUN_ON_CPU}); err != nil {
		return fmt.Errorf("credit CPU %d: %w", cpu, err)
	}
	return nil
}

// cgroupValue is one CPU's readings of one cgroup.
type cgroupValue []Reading

// UnmarshalBinary decodes the map value, reusing v's storage.
func (v *cgroupValue) UnmarshalBinary(b []byte) error {
	n := len(b) / int(unsafe.Sizeof(Reading{}))
	if cap(*v) < n {
		*v = make([]Reading, n)
	}
	*v = (*v)[:n]
	for i := range *v {
		o := b[i*24:]
		(*v)[i] = Reading{binary.NativeEndian.Uint64(o), binary.NativeEndian.Uint64(o[8:]), binary.NativeEndian.Uint64(o[16:])}
	}
	return nil
}

// Read calls fn with each cgroup's readings on each possible CPU (index: CPU
// number); fn must not keep them. The counts only grow while a cgroup is in
// the map.
//
// It reads the map in batches (BPF_MAP_LOOKUP_BATCH, Linux 5.6): walking it
// key by key costs two syscalls per cgroup, most of a cycle's CPU with a
// thousand cgroups. Where the kernel cannot batch, it walks.
func (c *Counter) Read(fn func(id uint64, perCPU [][]Reading)) error {
	if !c.noBatch {
		n, err := c.readBatch()
		if err == nil {
			perCPU := make([][]Reading, c.cpus)
			for i, id := range c.keys[:n] {
				for cpu := range perCPU {
					o := (i*c.cpus + cpu) * c.events
					perCPU[cpu] = c.batch[o : o+c.events : o+c.events]
				}
				fn(id, perCPU)
			}
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("read the cgroup map: %w", err)
		}
		c.noBatch = true
	}
	return c.walk(fn)
}

// batchKeys is how many cgroups one batch syscall reads; the kernel reads a
// hash map bucket by bucket and answers ENOSPC only for a bucket larger than
// this.
const batchKeys = 256

// readBatch reads the whole map into c.keys and c.batch (cgroup i's readings
// on CPU j from (i*cpus+j)*events, the kernel's layout, written in place:
// decoding every slot of every batch cost more than the syscalls saved) and
// returns the number of cgroups; nothing is handed out before all of it is
// read, so a failure part-way loses nothing.
func (c *Counter) readBatch() (int, error) {
	var cursor ebpf.MapBatchCursor
	n := 0
	for {
		if len(c.keys) < n+batchKeys {
			c.keys = slices.Grow(c.keys, n+batchKeys-len(c.keys))[:n+batchKeys]
			c.batch = slices.Grow(c.batch, (n+batchKeys)*c.cpus*c.events-len(c.batch))[:(n+batchKeys)*c.cpus*c.events]
		}
		got, err := c.objs.Cgroups.BatchLookup(&cursor, c.keys[n:n+batchKeys], c.batch[n*c.cpus*c.events:(n+batchKeys)*c.cpus*c.events], nil)
		n += got
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// walk reads the map key by key.
func (c *Counter) walk(fn func(id uint64, perCPU [][]Reading)) error {
	var id uint64
	perCPU := make([][]Reading, c.cpus)
	it := c.objs.Cgroups.Iterate()
	for it.Next(&id, &c.values) {
		for i, v := range c.values {
			perCPU[i] = v
		}
		fn(id, perCPU)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the cgroup map: %w", err)
	}
	return nil
}

// Sum adds up perCPU readings over cpus (nil: all).
func Sum(perCPU [][]Reading, cpus []int, out []Reading) {
	clear(out)
	add := func(v []Reading) {
		for i := range min(len(v), len(out)) {
			out[i].Counter += v[i].Counter
			out[i].Enabled += v[i].Enabled
			out[i].Running += v[i].Running
		}
	}
	if cpus == nil {
		for _, v := range perCPU {
			add(v)
		}
		return
	}
	for _, cpu := range cpus {
		if cpu < len(perCPU) {
			add(perCPU[cpu])
		}
	}
}

// Forget removes a cgroup (one that has been deleted) from the maps.
func (c *Counter) Forget(id uint64) error {
	if err := c.objs.Cgroups.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forget cgroup %d: %w", id, err)
	}
	if err := c.objs.Ancestors.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forget the ancestry of cgroup %d: %w", id, err)
	}
	return nil
}

// Ancestors returns the ids of cgroup id's ancestors at levels 1 to the
// Depth it was loaded with, nearest the root first, as the program
// recorded them when it first credited id (its own cgroup and the root are
// not among them); ok is false when it holds no record of id.
func (c *Counter) Ancestors(id uint64) (ids []uint64, ok bool, err error) {
	rec := make([]uint64, c.objs.Ancestors.ValueSize()/8)
	if err := c.objs.Ancestors.Lookup(id, rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("ancestry of cgroup %d: %w", id, err)
	}
	for _, a := range rec[1:] {
		if a != 0 {
			ids = append(ids, a)
		}
	}
	return ids, true, nil
}

// Stats returns the programs' own counters and, where an operator has turned
// the kernel's bpf_stats on (kernel.bpf_stats_enabled: node-wide, it slows
// every BPF program), their run time. The exporter never turns them on.
func (c *Counter) Stats() (Stats, error) {
	var s Stats
	runs := make([]uint64, 4)
	for i, dst := range []*uint64{&s.MapFull, &s.ReadFailed, &s.Credits, &s.SwitchesMissed, &s.Unattributed, &runs[0], &runs[1], &runs[2], &runs[3]} {
		per := make([]uint64, c.cpus)
		if err := c.objs.Stats.Lookup(uint32(i), per); err != nil {
			return s, fmt.Errorf("read program stats: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	s.Timed = perf.BPFStatsEnabled()
	for i, p := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_switch", c.objs.OnSwitch}, {"cpu_idle", c.objs.OnIdleExit}, {"cgroup_attach_task", c.objs.OnCgroupAttach}, {"credit_now", c.objs.CreditNow}} {
		prog := model.BPFProgram{Name: p.name, Runs: runs[i]}
		if s.Timed {
			st, err := p.prog.Stats()
			if err != nil {
				return s, fmt.Errorf("read the kernel's stats of %s: %w", p.name, err)
			}
			prog.RunSeconds = st.Runtime.Seconds()
		}
		s.Programs = append(s.Programs, prog)
	}
	return s, nil
}

// Close detaches from every CPU and frees the program and maps.
func (c *Counter) Close() error {
	for cpu := range c.switches {
		c.Detach(cpu)
	}
	c.switch_.Close()
	c.idleExit.Close()
	c.moves.Close()
	return c.objs.Close()
}

// MapBytes is the kernel's estimate of the memory the cgroup map and the
// ancestry map use (memlock in their fdinfo): both are preallocated, sized by
// Options.MaxCgroups.
func (c *Counter) MapBytes() (uint64, error) {
	var sum uint64
	for _, m := range []*ebpf.Map{c.objs.Cgroups, c.objs.Ancestors} {
		n, err := memlock(m)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// memlock reads a map's memlock from its fdinfo.
func memlock(m *ebpf.Map) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, fmt.Errorf("map fdinfo: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("map fdinfo has no memlock")
}
