package cgroupbpf

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collectors/perf"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// pong echoes bytes from stdin to stdout until EOF: the far end of a ping-pong
// whose every round trip is two cgroup switches (run from TestMain).
func pong() {
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			return
		}
		os.Stdout.Write(b[:])
	}
}

// BenchmarkPingPong runs pipe round trips between this process (root cgroup)
// and a helper in its own cgroup, without and with the program attributing
// four software events on every CPU; ns/op is one round trip. It reports the
// program's own cost per run from the kernel's bpf_stats.
func BenchmarkPingPong(b *testing.B) {
	testenv.RequireRoot(b)
	mnt := testenv.Cgroup2Mount()
	testenv.Require(b, mnt != "", "needs a cgroup v2 hierarchy")
	dir := filepath.Join(mnt, fmt.Sprintf("pmu_exporter_bench_%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	defer os.Remove(dir)
	cg, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), "CGROUPBPF_PONG=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	roundTrips := func(b *testing.B) {
		var buf [1]byte
		for b.Loop() {
			in.Write(buf[:])
			if _, err := io.ReadFull(out, buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("not-attributing", roundTrips)
	b.Run("attributing-4-events", func(b *testing.B) {
		os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("1"), 0)
		defer os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("0"), 0)
		c, err := Load(Options{Events: 4, Depth: 4, MaxCgroups: 256})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		attrs := []eventspec.Attr{
			{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK},
			{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK},
			{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS},
			{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
		}
		for _, cpu := range testenv.OnlineCPUs(b) {
			g, err := perf.OpenGroup(attrs, []string{"cpu-clock", "task-clock", "page-faults", "context-switches"}, perf.SystemWide(cpu))
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			for i := range attrs {
				if err := c.SetEvent(i, cpu, g.FD(i)); err != nil {
					b.Fatal(err)
				}
				defer c.ClearEvent(i, cpu)
			}
			if err := c.Attach(cpu); err != nil {
				b.Fatal(err)
			}
		}
		before, _ := c.objs.OnSwitch.Stats()
		roundTrips(b)
		after, _ := c.objs.OnSwitch.Stats()
		// The switch credit runs at every context switch and returns at once
		// when both tasks are in one cgroup, so its cost per run averages
		// both kinds.
		if runs := after.RunCount - before.RunCount; runs > 0 {
			b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(runs), "ns/program-run")
			b.ReportMetric(float64(runs)/float64(b.N), "program-runs/op")
		}
	})
}

// BenchmarkCreditNow is the per-cycle credit on each CPU (the program run
// there by BPF_PROG_TEST_RUN, an IPI for another CPU) from a thread on CPU 0,
// with the other CPUs idle or busy; cpu-ns/op is this process's CPU time (the
// caller waits for the remote CPU to take the IPI).
func BenchmarkCreditNow(b *testing.B) {
	testenv.RequireRoot(b)
	c, err := Load(Options{Events: 2, Depth: 1, MaxCgroups: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, cpu := range testenv.OnlineCPUs(b) {
		b.Run(fmt.Sprintf("cpu=%d", cpu), func(b *testing.B) {
			// Each sub-benchmark runs on a goroutine of its own: pin its
			// thread there, and leave it locked, so that the runtime ends
			// the thread with the goroutine rather than hand its narrowed
			// affinity to others (and RUSAGE_THREAD reads this one thread).
			runtime.LockOSThread()
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				b.Fatal(err)
			}
			var ru0, ru1 unix.Rusage
			unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
			for b.Loop() {
				if err := c.CreditNow(cpu); err != nil {
					b.Fatal(err)
				}
			}
			unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
			b.ReportMetric(float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkRead reads a map holding 10 cgroups, batched and walked key by
// key, with the map sized for 1,024 and for 16,384 cgroups (the default
// --collector.cgroup.max-tracked): the kernel visits every bucket either way.
func BenchmarkRead(b *testing.B) {
	testenv.RequireRoot(b)
	for _, size := range []int{1024, 16384} {
		c, err := Load(Options{Events: 2, Depth: 1, MaxCgroups: size})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for i := range 10 {
			v := make([]cgroupValue, c.cpus)
			for cpu := range v {
				v[cpu] = make(cgroupValue, 2)
			}
			if err := c.objs.Cgroups.Put(uint64(1<<40+i), v); err != nil {
				b.Fatal(err)
			}
		}
		for _, batched := range []bool{true, false} {
			b.Run(fmt.Sprintf("max=%d/batched=%v", size, batched), func(b *testing.B) {
				c.noBatch = !batched
				for b.Loop() {
					if err := c.Read(func(uint64, [][]Reading) {}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
