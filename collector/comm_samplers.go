package collector

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/feed"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/perfsample"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podmeta"
	"github.com/pmu-exporter/pmu_exporter/model"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// commSamplers are the address sampler's samplers, by target cgroup ("":
// every task), each with its reader goroutine once running.
type commSamplers struct {
	b           *build
	cfgs        []sampling.Config
	stats       *samplestat.Stats
	dec         *feed.Decoder
	root        string
	budgetShare int // the budget is split among this many samplers (0: 1)
	// nodeRegs is what the selected workloads' debug registers serve by
	// the node's flags (an annotated pod may choose), watchpoints whether
	// the engine runs; said is the annotation value each pod was last
	// told about (a log line per pod and value, not per follow).
	nodeRegs    model.Registers
	watchpoints bool
	said        map[string]string

	mu      sync.Mutex
	running map[string]*commSampler
}

type commSampler struct {
	smp    *perfsample.Sampler
	cgroup *os.File
	regs   model.Registers    // what its threads' debug registers serve
	stop   context.CancelFunc // nil until its reader runs
	done   chan struct{}
	// unsubscribe ends its subscription to the CPU hotplug events.
	unsubscribe func()
}

// registers is what the node's flags make the selected workloads'
// debug registers serve.
func (o commFlags) registers() model.Registers {
	switch {
	case o.watchpoints:
		return model.RegistersComm
	case o.reuse:
		return model.RegistersReuse
	}
	return model.RegistersNone
}

// podAnnotations are the values of an annotation on this node's pods, by
// pod UID (podmeta.Index).
type podAnnotations interface {
	Annotations(key string) map[string]string
}

// podRegisters is what the annotation value v asks of a pod's debug
// registers, and whether it selects the pod at all: "true" takes the
// node's flags, "watchpoints" and "reuse" choose; anything else does not
// select it.
func (c *commSamplers) podRegisters(v string) (model.Registers, bool) {
	switch v {
	case "true":
		return c.nodeRegs, true
	case model.RegistersComm.String():
		return model.RegistersComm, true
	case model.RegistersReuse.String():
		return model.RegistersReuse, true
	}
	return model.RegistersNone, false
}

// open opens a sampler for target (a cgroup below root, or "" for every
// task), whose threads' debug registers serve regs.
func (c *commSamplers) open(target string, regs model.Registers) error {
	b := c.b
	share := float64(max(c.budgetShare, 1))
	// The address sampler's samples arm watchpoints, except in private
	// reuse, where the watched threads' own samples do (their leaders
	// wake the trap reader): then each sample wakes the reader, so that
	// an arm follows its sample by the reader's reaction. The poll's
	// timeout stays 100 ms: polling every 10 ms as well, for samples that
	// had already woken it, cost half the exporter's CPU with watchpoints,
	// which its governor took from the samples (docs/benchmarks.md).
	watching := regs == model.RegistersComm || regs == model.RegistersReuse && b.f.comm.reuseMode == "shared"
	opts := perfsample.Options{
		Logger: b.log, OnlineCPUs: b.online.Read, Pages: b.f.sampling.pages, Poll: 100 * time.Millisecond, Govern: 500 * time.Millisecond, WakeEach: watching,
		MIDR: b.s.midr, AuxBytes: b.f.sampling.auxKiB << 10,
		Governor:  sampling.NewGovernor(b.f.comm.budget/share, b.s.facts.MaxSampleRate),
		AfterRead: func(took time.Duration, _ int) { b.p.health.Observe("comm", took, nil) },
		BeginPass: func() func() { return b.p.health.Begin("comm") },
	}
	root, v1 := cgroupRoot(b.f.cgroups, *b.s)
	opts.CgroupOf = taskCgroups(b.f.procfs, root, v1, b.log)
	cs := &commSampler{regs: regs}
	opts.Hotplug, cs.unsubscribe = b.hotplugEvents()
	if target != "" {
		f, err := os.Open(filepath.Join(c.root, target))
		if err != nil {
			return err
		}
		cs.cgroup, opts.Cgroup = f, f
	}
	smp, failures, err := perfsample.Open(c.cfgs, b.s.facts.OnlineCPUs, feed.NewSink(c.stats, c.dec), opts)
	for _, fl := range failures {
		b.log.Warn("address sampler not opened on a CPU", "cpu", fl.CPU, "cgroup", target, "err", fl.Err)
	}
	if err != nil {
		cs.unsubscribe()
		if cs.cgroup != nil {
			cs.cgroup.Close()
		}
		return fmt.Errorf("address sampler: %w", err)
	}
	cs.smp = smp
	c.mu.Lock()
	c.running[target] = cs
	c.mu.Unlock()
	return nil
}

// start runs a sampler's reader until ctx ends or it is closed.
func (c *commSamplers) start(ctx context.Context, cs *commSampler) {
	ctx, cs.stop = context.WithCancel(ctx)
	cs.done = make(chan struct{})
	go func() {
		defer close(cs.done)
		if err := cs.smp.Run(ctx); err != nil {
			c.b.log.Error("address sampler stopped", "err", err)
			c.b.p.health.Observe("comm", 0, err)
		}
	}()
}

// close stops and closes the sampler of target.
func (c *commSamplers) close(target string) {
	c.mu.Lock()
	cs := c.running[target]
	delete(c.running, target)
	c.mu.Unlock()
	if cs == nil {
		return
	}
	if cs.stop != nil {
		cs.stop()
		<-cs.done
	}
	cs.smp.Close()
	cs.unsubscribe()
	if cs.cgroup != nil {
		cs.cgroup.Close()
	}
}

func (c *commSamplers) closeAll() {
	for _, t := range c.targets() {
		c.close(t)
	}
}

func (c *commSamplers) targets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.running))
	for t := range c.running {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func (c *commSamplers) resetCPU(cpu int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cs := range c.running {
		cs.smp.ResetCPU(cpu)
	}
}

// periods are the samplers' periods, by target.
func (c *commSamplers) periods() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.running))
	for t, cs := range c.running {
		out[t] = cs.smp.Period(0)
	}
	return out
}

// run reads the samplers until ctx ends; with annotated, it follows the
// annotated pods every podsEvery: a sampler per pod cgroup.
func (c *commSamplers) run(ctx context.Context, annotated podAnnotations) {
	c.mu.Lock()
	for _, cs := range c.running {
		c.start(ctx, cs)
	}
	c.mu.Unlock()
	if annotated != nil {
		t := time.NewTicker(podsEvery)
		defer t.Stop()
		for ctx.Err() == nil {
			c.follow(ctx, c.annotatedPods(annotated.Annotations(podmeta.CommAnnotation)))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}
	<-ctx.Done()
	c.mu.Lock()
	var done []chan struct{}
	for _, cs := range c.running {
		if cs.done != nil {
			done = append(done, cs.done)
		}
	}
	c.mu.Unlock()
	for _, d := range done {
		<-d
	}
}

// Configs and Period make the set the sampling collector's source: one
// event, at the period of the first sampler by target (or the configured
// one).
func (c *commSamplers) Configs() []sampling.Config { return c.cfgs }

// Period implements exporter.SamplingSource.
func (c *commSamplers) Period(int) uint64 {
	if t := c.targets(); len(t) > 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		if cs := c.running[t[0]]; cs != nil {
			return cs.smp.Period(0)
		}
	}
	return c.cfgs[0].Period
}

// watchThreads gives the decoder the threads of the sampled cgroups, every
// second, at most max of them, and reads the traps as they come.
func (c *commSamplers) watchThreads(ctx context.Context, max int) {
	follow := time.NewTicker(time.Second)
	defer follow.Stop()
	// The governor's budget grows with the watched processes' CPU time,
	// read ten times a second so that a process just watched need not
	// wait a second for its first arms.
	ran := time.NewTicker(100 * time.Millisecond)
	defer ran.Stop()
	// The traps are read as they come: each ends its slot's sample, and
	// the slot's watchpoints in the other threads wait to be disarmed.
	// watchThreads returns only once this reader has, so that closing the
	// engine never unmaps a ring it reads.
	reading := c.readTraps(ctx)
	defer func() { <-reading }()
	watched := map[uint32]model.Registers{}
	procs, err := cgroupid.NewThreadProcs(c.b.f.procfs)
	if err != nil {
		c.b.log.Warn("the watched pods' threads cannot be followed", "err", err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-reading:
			if ctx.Err() != nil {
				return // shutting down
			}
			// The reader stopped on an error (logged): a watchpoint nobody
			// reads and disarms traps on every access, so none stays.
			for pid, use := range watched {
				c.dec.SetWatched(pid, nil, use)
			}
			c.b.log.Error("watchpoints closed in every watched thread: their traps can no longer be read")
			return
		case <-ran.C:
			for pid := range watched {
				if cpu, err := perf.ProcessCPU(pid); err == nil {
					c.dec.Ran(pid, cpu.Seconds())
				}
			}
		case <-follow.C:
			c.followThreads(procs, watched, max)
		}
	}
}

// readTraps reads the watchpoints' traps as they come until ctx ends or a
// read fails (logged), then closes the channel it returns.
func (c *commSamplers) readTraps(ctx context.Context) <-chan struct{} {
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		periodFailed := false
		for ctx.Err() == nil {
			if err := c.dec.WaitTraps(100 * time.Millisecond); err != nil {
				c.b.log.Error("watchpoint traps not read", "err", err)
				return
			}
			c.dec.ReadTraps(c.Period(0))
			if !c.cfgs[0].Memory { // timer samples: the watched threads' own follow their period
				if err := c.dec.SampleReuseEvery(c.Period(0)); err != nil && !periodFailed {
					periodFailed = true // said once
					c.b.log.Error("reuse: the watched threads' sample period not changed", "err", err)
				}
			}
		}
	}()
	return reading
}

// followThreads gives the decoder the threads, up to max, of the sampled
// cgroups whose registers serve watchpoints, and takes them from those
// that left; watched is what each watched process's registers serve.
func (c *commSamplers) followThreads(procs *cgroupid.ThreadProcs, watched map[uint32]model.Registers, max int) {
	byPID := map[uint32][]uint32{}
	useOf := map[uint32]model.Registers{}
	n := 0
	for _, target := range c.targets() {
		c.mu.Lock()
		cs := c.running[target]
		c.mu.Unlock()
		if cs == nil || cs.regs == model.RegistersNone {
			continue
		}
		for _, tid := range cgroupid.Threads(filepath.Join(c.root, target)) {
			if n >= max {
				break
			}
			if pid, ok := procs.Of(tid); ok {
				byPID[pid] = append(byPID[pid], tid)
				useOf[pid] = cs.regs
				n++
			}
		}
	}
	procs.ForgetUnlisted()
	for pid, use := range watched {
		if byPID[pid] == nil {
			c.dec.SetWatched(pid, nil, use)
			delete(watched, pid)
		}
	}
	for pid, tids := range byPID {
		if err := c.dec.SetWatched(pid, tids, useOf[pid]); err != nil {
			c.b.log.Debug("watchpoints not opened in some threads", "pid", pid, "err", err)
		}
		if use, ok := watched[pid]; !ok || use != useOf[pid] {
			if cpu, err := perf.ProcessCPU(pid); err == nil {
				c.dec.Ran(pid, cpu.Seconds()) // the time it ran unwatched does not count
			}
		}
		watched[pid] = useOf[pid]
	}
}

// podsEvery is how often the annotated pods are looked for.
const podsEvery = 5 * time.Second

// follow opens samplers for the cgroups of pods newly annotated and closes
// those of pods gone or no longer annotated.
func (c *commSamplers) follow(ctx context.Context, pods map[string]model.Registers) {
	want := podCgroups(c.root, pods)
	have := c.targets()
	for _, t := range have {
		c.mu.Lock()
		cs := c.running[t]
		c.mu.Unlock()
		if cs == nil {
			continue // closed meanwhile (shutting down)
		}
		if w, ok := want[t]; !ok || w != cs.regs {
			c.close(t)
			c.b.log.Info("address sampler: pod no longer selected as it was", "cgroup", t, "registers", cs.regs)
		}
	}
	have = c.targets()
	for t, regs := range want {
		if slices.Contains(have, t) {
			continue
		}
		if err := c.open(t, regs); err != nil {
			c.b.log.Warn("address sampler: annotated pod not sampled", "cgroup", t, "err", err)
			continue
		}
		c.mu.Lock()
		c.start(ctx, c.running[t])
		c.mu.Unlock()
		c.b.log.Info("address sampler: sampling annotated pod", "cgroup", t, "registers", regs)
	}
}

// annotatedPods are the pods the annotation values by UID select, with
// what their debug registers serve: none where the engine does not run
// (said once per pod). A value that selects nothing and is not "false"
// is said once per pod too.
func (c *commSamplers) annotatedPods(values map[string]string) map[string]model.Registers {
	out := map[string]model.Registers{}
	for uid, v := range values {
		regs, ok := c.podRegisters(v)
		tell := c.said[uid] != v
		c.said[uid] = v
		switch {
		case !ok:
			if tell && v != "false" {
				c.b.log.Warn("address sampler: pod not selected: "+podmeta.CommAnnotation+" takes true, watchpoints, reuse or false", "pod_uid", uid, "value", v)
			}
			continue
		case regs != model.RegistersNone && !c.watchpoints:
			if tell {
				c.b.log.Warn("address sampler: pod sampled without watchpoints: none work here (see the start's log, pmu_exporter check)", "pod_uid", uid, "value", v)
			}
			regs = model.RegistersNone
		}
		out[uid] = regs
	}
	for uid := range c.said {
		if _, ok := values[uid]; !ok {
			delete(c.said, uid)
		}
	}
	return out
}

// podCgroups finds the pod-level cgroups (below root) of the pods uids, as
// the kubelet lays them out (podcgroup.Parse).
func podCgroups(root string, pods map[string]model.Registers) map[string]model.Registers {
	if len(pods) == 0 {
		return nil
	}
	out := map[string]model.Registers{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if strings.Count(rel, "/") > 6 {
			return filepath.SkipDir
		}
		if id, ok := podcgroup.Parse(rel); ok && id.PodUID != "" && id.ContainerID == "" {
			if v, ok := pods[id.PodUID]; ok {
				out["/"+rel] = v
				return filepath.SkipDir // its containers are inside it
			}
		}
		return nil
	})
	return out
}
