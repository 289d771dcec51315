package schedbpf

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/cgroupid"
)

// helperEnv makes the test binary a workload (TestMain) instead.
const helperEnv = "PMU_SCHEDBPF_WORKLOAD"

// TestMain doubles as the workload the tests run in their cgroups, this
// binary re-executed with helperEnv set: "switchy" is four threads that
// spin 50 µs and sleep 100 µs in turn and two that spin, which keeps every
// CPU's run queue busy and switches often.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		switchy()
		return
	}
	os.Exit(m.Run())
}

// switchy runs until killed.
func switchy() {
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	runtime.GOMAXPROCS(6)
	for range 4 {
		go func() {
			runtime.LockOSThread()
			for {
				spin(50 * time.Microsecond)
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	for range 2 {
		go func() {
			runtime.LockOSThread()
			for {
				spin(time.Second)
			}
		}()
	}
	for {
		spin(time.Second)
	}
}

// workload starts this binary as workload mode in cgroup dir, on CPU cpu
// alone from its birth (-1: anywhere), at nice -20 where urgent, and
// returns it. Mode "spin" is a shell's busy loop instead: one thread that
// never sleeps (a Go program stops its spinning thread for its collector
// now and then).
func workload(t *testing.T, dir, mode string, cpu int, urgent bool) *exec.Cmd {
	t.Helper()
	argv := []string{os.Args[0]}
	if mode == "spin" {
		argv = []string{"sh", "-c", "while :; do :; done"}
	}
	if urgent {
		argv = append([]string{"nice", "-n", "-20"}, argv...)
	}
	return testenv.StartOn(t, dir, cpu, append(os.Environ(), helperEnv+"="+mode), argv...)
}

// stop stops the process with SIGSTOP and waits until each of its threads
// is stopped: every one has then switched out for the last time.
func stop(t *testing.T, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGSTOP)
	for range 500 {
		threads, _ := procfs.AllThreads(pid)
		stopped := 0
		for _, th := range threads {
			if st, err := th.Stat(); err == nil && (st.State == "T" || st.State == "t") {
				stopped++
			}
		}
		if stopped > 0 && stopped == len(threads) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}

// runDelay is the kernel's run-queue wait of every thread of pid, summed
// (/proc/PID/task/TID/schedstat's second field), in ns.
func runDelay(t *testing.T, pid int) uint64 {
	t.Helper()
	var sum uint64
	for _, s := range threadSchedstats(t, pid) {
		sum += s.WaitingNanoseconds
	}
	return sum
}

// threadSchedstats are the schedstat lines of pid's threads.
func threadSchedstats(t *testing.T, pid int) []procfs.ProcSchedstat {
	t.Helper()
	threads, err := procfs.AllThreads(pid)
	if err != nil || len(threads) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	var out []procfs.ProcSchedstat
	for _, th := range threads {
		s, err := th.Schedstat()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func load(t *testing.T) *Waits {
	t.Helper()
	testenv.RequireRoot(t)
	w, err := Load(Options{MaxCgroups: 4096, MaxPairs: 16384})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func waitOf(t *testing.T, w *Waits, id uint64) Wait {
	t.Helper()
	var got Wait
	if err := w.Waits(func(cg uint64, wt Wait) {
		if cg == id {
			got = wt
		}
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func cgroupID(t *testing.T, dir string) uint64 {
	t.Helper()
	id, err := cgroupid.ID(dir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A cgroup's run-queue wait is the kernel's own: over 20 runs of a
// switch-heavy process (its threads all born after the load), stopped so
// that each thread's last run has ended, the program's sum for the cgroup
// grows by the sum of its threads' schedstat run delay, within 1%; the
// same with both CPUs saturated by a burner in another cgroup. The
// histogram holds every wait once, and the pairs share out the sum.
func TestWaitIsSchedstatRunDelay(t *testing.T) {
	w := load(t)
	_, dirs := testenv.Cgroups(t, "pod", "noise")
	id := cgroupID(t, dirs[0])
	for _, saturated := range []bool{false, true} {
		if saturated {
			for range 2 {
				burner := testenv.BurnIn(t, dirs[1], 30*time.Second)
				// Gone before the cgroups are removed.
				defer func() { syscall.Kill(-burner.Process.Pid, syscall.SIGKILL); burner.Wait() }()
			}
		}
		for run := range 10 {
			before := waitOf(t, w, id)
			cmd := workload(t, dirs[0], "switchy", -1, false)
			time.Sleep(150 * time.Millisecond)
			stop(t, cmd.Process.Pid)
			want := runDelay(t, cmd.Process.Pid)
			after := waitOf(t, w, id)
			cmd.Process.Kill()
			cmd.Wait()
			got := after.Sum - before.Sum
			if want == 0 || absDiff(got, want) > want/100 {
				t.Errorf("saturated %v, run %d: %d ns charged, schedstat says %d (%.3f%%)", saturated, run, got, want, 100*(float64(got)/float64(want)-1))
			}
			var n uint64
			for _, b := range after.Bucket {
				n += b
			}
			if n != after.Count {
				t.Errorf("%d waits, %d in the buckets", after.Count, n)
			}
			if run == 0 {
				t.Logf("saturated %v: %d ns charged over %d waits; schedstat %d ns", saturated, got, after.Count-before.Count, want)
			}
		}
	}
	// The killed processes' last threads may still be switching out for
	// the last time after they were reaped: read once nothing changes.
	var paired, total uint64
	for range 50 {
		paired, total = 0, waitOf(t, w, id).Sum
		if err := w.Pairs(func(p Pair, ns uint64) {
			if p.Victim == id {
				paired += ns
			}
		}); err != nil {
			t.Fatal(err)
		}
		if waitOf(t, w, id).Sum == total {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The pairs share out the waits, up to an excess of 0.006-0.06% seen
	// in 3 of 6 runs here that is not explained yet (segments of one
	// CPU that overlap: see the note); beyond 0.1% fails.
	if absDiff(paired, total) > total/1000 {
		t.Errorf("the pairs share out %d ns of the cgroup's %d", paired, total)
	}
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// Who held the CPU: a victim spinning on CPU 0, an antagonist started
// beside it there once the victim runs, and a bystander spinning on CPU 1
// (started first).
// The victim (a shell's busy loop, one thread) is runnable throughout, so
// it waits exactly while any other task runs on CPU 0: the wait charged to
// the antagonist is the antagonist's CPU time (its schedstat run time),
// within 1%, plus at most the time CPU 0 spent in interrupts or stolen
// meanwhile, which a wait counts and a run time does not; the antagonist
// is stopped first, so that none of its time is after the victim's last
// wait. The bystander, which never ran where the victim waited, is
// charged at most 1% of the victim's wait. Both run at nice -20, so that
// the machine's other work barely gets CPU 0: the antagonist then held the
// CPU for 97-99% of the wait beside a CI run's virtual machine; the test
// logs the share rather than bound it, since a busier machine's other
// work rightly takes its part.
func TestHolderIsWhoRanMeanwhile(t *testing.T) {
	testenv.Require(t, runtime.NumCPU() >= 2, "needs two CPUs")
	w := load(t)
	_, dirs := testenv.Cgroups(t, "victim", "antagonist", "bystander")
	ids := [3]uint64{cgroupID(t, dirs[0]), cgroupID(t, dirs[1]), cgroupID(t, dirs[2])}
	// Each started once the one before runs, each on its CPU from birth.
	bystander := workload(t, dirs[2], "spin", 1, true)
	ranFor(t, bystander.Process.Pid, 50*time.Millisecond)
	victim := workload(t, dirs[0], "spin", 0, true)
	ranFor(t, victim.Process.Pid, 50*time.Millisecond)
	lost0 := interruptedTime(t, 0)
	antagonist := workload(t, dirs[1], "spin", 0, true)
	ranFor(t, antagonist.Process.Pid, 500*time.Millisecond)
	stop(t, antagonist.Process.Pid)
	stop(t, victim.Process.Pid)
	stop(t, bystander.Process.Pid)
	held := runTime(t, antagonist.Process.Pid)
	lost := interruptedTime(t, 0) - lost0
	var all uint64
	by := map[uint64]uint64{}
	if err := w.Pairs(func(p Pair, ns uint64) {
		if p.Victim == ids[0] {
			all += ns
			by[p.Holder] += ns
		}
	}); err != nil {
		t.Fatal(err)
	}
	share := func(id uint64) float64 { return float64(by[id]) / float64(all) }
	t.Logf("the victim waited %v: %.4f behind the antagonist (which ran %v; CPU 0 in interrupts or stolen %v), %.4f behind the bystander, %.4f behind nobody, %.4f behind other work",
		time.Duration(all), share(ids[1]), time.Duration(held), lost, share(ids[2]), share(None), 1-share(ids[1])-share(ids[2])-share(None))
	if got := by[ids[1]]; held < uint64(300*time.Millisecond) || got < held-held/100 || got > held+uint64(lost)+held/100 {
		t.Errorf("the antagonist ran %v (CPU 0 lost %v to interrupts and the hypervisor) and was charged %v of the victim's wait", time.Duration(held), lost, time.Duration(got))
	}
	if share(ids[2]) > 0.01 {
		t.Errorf("the bystander was charged %v of the victim's %v", time.Duration(by[ids[2]]), time.Duration(all))
	}
}

// ranFor waits until pid's threads have run for d.
func ranFor(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); runTime(t, pid) < uint64(d); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("process %d did not run for %v in 30 s", pid, d)
		}
	}
}

// interruptedTime is CPU cpu's time in interrupts and stolen by the
// hypervisor (/proc/stat: irq, softirq, steal), which the run queue's
// clock counts, and so the waits do, and a task's run time does not.
func interruptedTime(t *testing.T, cpu int64) time.Duration {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	stat, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := stat.CPU[cpu]
	if !ok {
		t.Fatalf("no cpu%d in /proc/stat", cpu)
	}
	return time.Duration((c.IRQ + c.SoftIRQ + c.Steal) * float64(time.Second))
}

// runTime is the CPU time of every thread of pid, summed (schedstat's
// first field), in ns.
func runTime(t *testing.T, pid int) uint64 {
	t.Helper()
	var sum uint64
	for _, s := range threadSchedstats(t, pid) {
		sum += s.RunningNanoseconds
	}
	return sum
}

// The program counts its own runs as the kernel's bpf_stats count them
// (within 2%: the two counts are read a moment apart), and reports its run
// time only while bpf_stats are on.
func TestStatsCountRuns(t *testing.T) {
	w := load(t)
	testenv.EnableBPFStats(t)
	read := func() (ours, kernel uint64, st Stats) {
		st, err := w.Stats()
		if err != nil {
			t.Fatal(err)
		}
		ks, err := w.Program().Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Program.Runs, ks.RunCount, st
	}
	ours0, kernel0, _ := read()
	for range 200 {
		time.Sleep(100 * time.Microsecond) // switches out of this thread
	}
	ours1, kernel1, st := read()
	dOurs, dKernel := ours1-ours0, kernel1-kernel0
	if dKernel < 200 || float64(dOurs) < 0.98*float64(dKernel)-20 || float64(dOurs) > 1.02*float64(dKernel)+20 {
		t.Errorf("the program counted %d runs of itself, the kernel %d", dOurs, dKernel)
	}
	if st.Program.Name != "sched_switch_wait" || st.Program.RunSeconds <= 0 {
		t.Errorf("with bpf_stats on: %+v", st)
	}
	if err := os.WriteFile(testenv.BPFStatsKnob, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	if _, _, st := read(); st.Program.RunSeconds != 0 {
		t.Errorf("bpf_stats off, and a run time: %+v", st)
	}
}
