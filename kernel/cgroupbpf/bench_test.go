package cgroupbpf

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
	"github.com/pmu-exporter/pmu_exporter/kernel/schedbpf"
)

// pong echoes bytes from stdin to stdout until EOF: the far end of a ping-pong
// whose every round trip is two context switches on each side (run from
// TestMain). Both descriptors are blocking pipes: a read sleeps in the
// kernel, with no Go scheduler between.
func pong() {
	runtime.LockOSThread()
	var b [1]byte
	for {
		if n, err := unix.Read(0, b[:]); n != 1 || err != nil {
			return
		}
		unix.Write(1, b[:])
	}
}

// pingPonger is this thread's end of pipe round trips with a pong process.
type pingPonger struct {
	cmd  *exec.Cmd
	w, r int // blocking pipe ends: to pong's stdin, from its stdout
}

// startPong starts pong inside the cgroup v2 directory dir, pinned to cpu
// (-1: anywhere), and pins the calling thread there too: a pinned pair on
// one CPU switches straight from one to the other, never through idle.
// The caller's goroutine keeps its OS thread locked until stop.
func startPong(tb testing.TB, dir string, cpu int) (*pingPonger, func()) {
	tb.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer cg.Close()
	var toPong, fromPong [2]int
	if err := unix.Pipe2(toPong[:], unix.O_CLOEXEC); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Pipe2(fromPong[:], unix.O_CLOEXEC); err != nil {
		tb.Fatal(err)
	}
	stdin, stdout := os.NewFile(uintptr(toPong[0]), "pong-stdin"), os.NewFile(uintptr(fromPong[1]), "pong-stdout")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), "CGROUPBPF_PONG=1")
	cmd.Stdin, cmd.Stdout = stdin, stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stdin.Close()
	stdout.Close()
	runtime.LockOSThread()
	var old unix.CPUSet
	unix.SchedGetaffinity(0, &old)
	if cpu >= 0 {
		var set unix.CPUSet
		set.Set(cpu)
		for _, pid := range []int{0, cmd.Process.Pid} {
			if err := unix.SchedSetaffinity(pid, &set); err != nil {
				tb.Fatal(err)
			}
		}
	}
	p := &pingPonger{cmd: cmd, w: toPong[1], r: fromPong[0]}
	return p, func() {
		unix.Close(p.w)
		unix.Close(p.r)
		cmd.Wait()
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}

// roundTrips makes n round trips.
func (p *pingPonger) roundTrips(tb testing.TB, n int) {
	var b [1]byte
	for range n {
		unix.Write(p.w, b[:])
		if k, err := unix.Read(p.r, b[:]); k != 1 || err != nil {
			tb.Fatalf("pong answered %d bytes: %v", k, err)
		}
	}
}

// switchProgram is what runs at sched_switch in a benchmark: its program
// (for bpf_stats) and how to take it away.
type switchProgram struct {
	prog  *ebpf.Program
	close func()
}

// attachEmpty attaches a program that returns at once to sched_switch, the
// way the credit is attached: the floor of any program there.
func attachEmpty(tb testing.TB) switchProgram {
	tb.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "empty_switch",
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     "sched_switch",
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		prog.Close()
		tb.Fatal(err)
	}
	return switchProgram{prog, func() { l.Close(); prog.Close() }}
}

// benchEvents are software events a credit reads, up to 8, one perf group,
// in the order the exporter gives them slots (clocks after the first).
var benchEvents = []struct {
	name   string
	config uint64
}{
	{"page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS},
	{"cpu-clock", unix.PERF_COUNT_SW_CPU_CLOCK},
	{"task-clock", unix.PERF_COUNT_SW_TASK_CLOCK},
	{"context-switches", unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
	{"cpu-migrations", unix.PERF_COUNT_SW_CPU_MIGRATIONS},
	{"minor-faults", unix.PERF_COUNT_SW_PAGE_FAULTS_MIN},
	{"major-faults", unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ},
	{"alignment-faults", unix.PERF_COUNT_SW_ALIGNMENT_FAULTS},
}

// sharedTimes reads the first of one perf group's events with its times
// and the others with those (task-clock not at all), as the exporter does.
func sharedTimes(names []string) []How {
	hows := make([]How, len(names))
	for i := 1; i < len(names); i++ {
		hows[i] = How{TimesFrom: 0, Shared: true, TaskClock: names[i] == "task-clock"}
	}
	return hows
}

// attachCredit loads the credit attributing the first n benchEvents on
// every online CPU, with ancestors to depth 4 (a pod's container is at
// level 4 or 5 under the kubepods slices).
func attachCredit(tb testing.TB, n int) switchProgram {
	tb.Helper()
	c, err := Load(Options{Events: n, Depth: 4, MaxCgroups: 256})
	if err != nil {
		tb.Fatal(err)
	}
	var attrs []eventspec.Attr
	var names []string
	for _, e := range benchEvents[:n] {
		attrs = append(attrs, eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: e.config})
		names = append(names, e.name)
	}
	var groups []*perf.Group
	for _, cpu := range testenv.OnlineCPUs(tb) {
		g, err := perf.OpenGroup(attrs, names, perf.SystemWide(cpu))
		if err != nil {
			tb.Fatal(err)
		}
		groups = append(groups, g)
		for i, how := range sharedTimes(names) {
			if err := c.SetEvent(i, cpu, g.FD(i), how); err != nil {
				tb.Fatal(err)
			}
		}
		if err := c.Attach(cpu); err != nil {
			tb.Fatal(err)
		}
	}
	return switchProgram{c.objs.OnSwitch, func() {
		c.Close()
		for _, g := range groups {
			g.Close()
		}
	}}
}

// attachWait loads the run-queue wait program (kernel/schedbpf), which runs
// at every switch out of a task, beside or instead of the credit.
func attachWait(tb testing.TB) switchProgram {
	tb.Helper()
	w, err := schedbpf.Load(schedbpf.Options{MaxCgroups: 256, MaxPairs: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	return switchProgram{w.Program(), func() { w.Close() }}
}

// BenchmarkSwitch is the cost of the program at context switches: pipe
// round trips (ns/op) between this thread and a pong process, with no
// program at sched_switch, an empty one (the floor of this design), and
// the credit reading 4 and 8 software events on every CPU; with bpf_stats
// on, each program's ns per run and runs per round trip.
//
//   - pinned/same-cgroup: both on one CPU in one cgroup, every switch the
//     credit's early return;
//   - pinned/cross-cgroup: both on one CPU in two cgroups, every switch a
//     full credit and none through idle;
//   - spread/cross-cgroup: anywhere, as a real pair of pods, so that the
//     CPUs also go idle and come back (credits into idle, at idle exits).
func BenchmarkSwitch(b *testing.B) {
	testenv.RequireRoot(b)
	mnt := testenv.Cgroup2Mount()
	testenv.Require(b, mnt != "", "needs a cgroup v2 hierarchy")
	testenv.EnableBPFStats(b)
	_, dirs := testenv.Cgroups(b, "pong")
	own := testenv.OwnCgroup(b)
	last := slices.Max(testenv.OnlineCPUs(b))
	for _, setting := range []struct {
		name string
		dir  string
		cpu  int
	}{
		{"pinned/same-cgroup", own, last},
		{"pinned/cross-cgroup", dirs[0], last},
		{"spread/cross-cgroup", dirs[0], -1},
	} {
		for _, program := range []struct {
			name   string
			attach func(testing.TB) switchProgram
		}{
			{"none", nil},
			{"empty", attachEmpty},
			{"credit-4", func(tb testing.TB) switchProgram { return attachCredit(tb, 4) }},
			{"credit-8", func(tb testing.TB) switchProgram { return attachCredit(tb, 8) }},
			{"wait", attachWait},
		} {
			b.Run(setting.name+"/"+program.name, func(b *testing.B) {
				p, stop := startPong(b, setting.dir, setting.cpu)
				defer stop()
				var sp switchProgram
				if program.attach != nil {
					sp = program.attach(b)
					defer sp.close()
				}
				var before ebpf.ProgramStats
				if sp.prog != nil {
					s, err := sp.prog.Stats()
					if err != nil {
						b.Fatal(err)
					}
					before = *s
				}
				b.ResetTimer()
				p.roundTrips(b, b.N)
				b.StopTimer()
				if sp.prog != nil {
					after, err := sp.prog.Stats()
					if err != nil {
						b.Fatal(err)
					}
					if runs := after.RunCount - before.RunCount; runs > 0 {
						b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(runs), "ns/program-run")
						b.ReportMetric(float64(runs)/float64(b.N), "program-runs/op")
					}
				}
			})
		}
	}
}

// BenchmarkCrossCgroupOverhead is the slowdown a program at sched_switch
// gives a switch-heavy pair of processes in two cgroups, anywhere on the
// machine: rounds of 20,000 round trips alternate without and with the
// program (the empty one, the floor; the credit with 4 software events),
// and the median of the pairs' ratios is reported as overhead-% (with the
// medians' round trips), so that the machine's drift and other tenants
// fall on both sides alike. b.N counts pairs.
func BenchmarkCrossCgroupOverhead(b *testing.B) {
	testenv.RequireRoot(b)
	mnt := testenv.Cgroup2Mount()
	testenv.Require(b, mnt != "", "needs a cgroup v2 hierarchy")
	_, dirs := testenv.Cgroups(b, "pong")
	for _, program := range []struct {
		name   string
		attach func(testing.TB) switchProgram
	}{
		{"empty", attachEmpty},
		{"credit-4", func(tb testing.TB) switchProgram { return attachCredit(tb, 4) }},
		{"wait", attachWait},
		{"credit-4+wait", func(tb testing.TB) switchProgram {
			c, w := attachCredit(tb, 4), attachWait(tb)
			return switchProgram{c.prog, func() { w.close(); c.close() }}
		}},
	} {
		b.Run(program.name, func(b *testing.B) {
			const trips = 20000
			p, stop := startPong(b, dirs[0], -1)
			defer stop()
			round := func() time.Duration {
				start := time.Now()
				p.roundTrips(b, trips)
				return time.Since(start) / trips
			}
			round() // warm both ends
			var ratios, without, with []float64
			for range b.N {
				w0 := round()
				sp := program.attach(b)
				w1 := round()
				sp.close()
				without, with = append(without, float64(w0)), append(with, float64(w1))
				ratios = append(ratios, float64(w1)/float64(w0))
			}
			b.ReportMetric(100*(median(ratios)-1), "overhead-%")
			b.ReportMetric(median(without), "ns/trip-without")
			b.ReportMetric(median(with), "ns/trip-with")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// median is the middle of v (the upper one of an even count).
func median(v []float64) float64 {
	v = slices.Clone(v)
	sort.Float64s(v)
	return v[len(v)/2]
}
