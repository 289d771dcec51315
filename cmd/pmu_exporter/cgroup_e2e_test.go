package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

const (
	e2ePod  = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
	e2eCtrA = "1111111111111111111111111111111111111111111111111111111111111111"
	e2eCtrB = "2222222222222222222222222222222222222222222222222222222222222222"
)

// measureRun runs run, a workload's burst, in hotplugtest.Measure once the
// exporter has every group open on every online CPU, and returns the scrapes
// before and after the run that no hotplug touched. A CPU that another
// process takes offline and back loses what ran there until the exporter's
// next read, so a run is judged by the growth of the series over it (grown),
// and run takes its own baselines afresh each try.
func (p *exporterProc) measureRun(t *testing.T, run func()) (before, after map[string]*dto.MetricFamily, body string) {
	t.Helper()
	hotplugtest.Measure(t, func(int) {
		p.awaitEveryCPU(t)
		_, before = p.scrape(t)
		run()
		time.Sleep(350 * time.Millisecond) // three 100 ms reads after the last credit
		body, after = p.scrape(t)
	})
	return before, after, body
}

// grown is how much the series of name with labels grew from before to
// after; one absent before counts from zero, one absent after fails the test.
func grown(t *testing.T, before, after map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	v0, _ := value(t, before, name, labels)
	return mustValue(t, after, name, labels) - v0
}

// usageGrowth calls run and returns how much each cgroup v2 directory's
// cpu.stat usage grew meanwhile.
func usageGrowth(t *testing.T, dirs []string, run func()) map[string]float64 {
	t.Helper()
	usage := map[string]float64{}
	for _, d := range dirs {
		usage[d] = -float64(testenv.CgroupUsage(t, d))
	}
	run()
	for _, d := range dirs {
		usage[d] += float64(testenv.CgroupUsage(t, d))
	}
	return usage
}

// TestServeCgroups runs the exporter with its defaults over a pod laid out as
// the kubelet's cgroupfs driver with containerd does, burns CPU in two
// containers, and checks the scraped per-cgroup series against cpu.stat, the
// pod's sum, the labels and promtool; then a removed container's series go
// away after the grace period.
func TestServeCgroups(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool")
	pod := "kubepods/burstable/pod" + e2ePod
	top, dirs := testenv.Cgroups(t, "kubepods", "kubepods/burstable", pod, pod+"/"+e2eCtrA, pod+"/"+e2eCtrB)
	rel := func(r string) string { return top + "/" + r }
	p := start(t, nil, "--collector.cgroup.grace-period=1s")
	var steal0, wallA, wallB time.Duration
	var usage map[string]float64
	before, mfs, body := p.measureRun(t, func() {
		usage = usageGrowth(t, dirs[2:5], func() {
			var started time.Time
			steal0, started = testenv.Stolen(t), time.Now()
			wa, wb := testenv.BurnIn(t, dirs[3], 500*time.Millisecond), testenv.BurnIn(t, dirs[4], 250*time.Millisecond)
			wb.Wait()
			wallB = time.Since(started)
			wa.Wait()
			wallA = time.Since(started)
		})
	})
	// perf's clock runs on while the hypervisor steals the CPU and through
	// part of each switch, cpu.stat's does not (testenv.ClockCeiling).
	steal := float64(testenv.StolenSince(t, steal0))

	clock := func(cgroup, container string) float64 {
		return grown(t, before, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": cgroup, "event": "cpu-clock", "pod": e2ePod, "container": container, "namespace": ""})
	}
	a, b, all := clock(rel(pod+"/"+e2eCtrA), e2eCtrA), clock(rel(pod+"/"+e2eCtrB), e2eCtrB), clock(rel(pod), "")
	// Spans with a switch the program did not see are unattributed, not
	// lost: a cgroup may fall short of cpu.stat by at most that much.
	unseen := grown(t, before, mfs, "pmu_cgroup_unattributed_events_total", map[string]string{"event": "cpu-clock"})
	for _, c := range []struct {
		got  float64
		dir  string
		wall time.Duration
	}{{a, dirs[3], wallA}, {b, dirs[4], wallB}, {all, dirs[2], wallA + wallB}} {
		usage := usage[c.dir]
		t.Logf("%s: attributed %v, cpu.stat %v, unattributed %v, up to %v stolen", c.dir, time.Duration(c.got), time.Duration(usage), time.Duration(unseen), time.Duration(steal))
		if c.got > testenv.ClockCeiling(t, usage, steal0, 0, c.wall) || c.got < 0.97*usage-unseen {
			t.Errorf("%s: attributed cpu-clock %v, cpu.stat %v, %v stolen meanwhile", c.dir, time.Duration(c.got), time.Duration(usage), time.Duration(steal))
		}
	}
	if math.Abs(all-(a+b)) > 1e-6*all {
		t.Errorf("pod %v != containers %v + %v", all, a, b)
	}
	if v := mustValue(t, mfs, "pmu_capability", map[string]string{"feature": "cgroup_attribution"}); v != 1 {
		t.Errorf("cgroup_attribution capability %v", v)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// Remove container B. A cgroup that appears afterwards makes the exporter
	// walk the hierarchy, which finds B gone; 1 s later its series are dropped.
	if err := os.Remove(dirs[4]); err != nil {
		t.Fatal(err)
	}
	late := filepath.Join(filepath.Dir(dirs[0]), "late")
	if err := os.Mkdir(late, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(late) })
	testenv.BurnIn(t, late, 50*time.Millisecond).Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		_, mfs = p.scrape(t)
		_, hasB := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": rel(pod + "/" + e2eCtrB)})
		_, hasLate := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": rel("late")})
		_, hasA := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": rel(pod + "/" + e2eCtrA)})
		if !hasB && hasLate && hasA {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after removal: container B still exported %v, new cgroup %v, container A %v\n%s", hasB, hasLate, hasA, p.log)
		}
	}
}

// TestServeWithoutBPF: root without CAP_BPF and CAP_SYS_ADMIN still counts on
// every CPU; the cgroup attribution says it is missing and why, and the
// allow-listed cgroup is counted with perf's cgroup mode instead, exactly,
// at its reported fd cost.
func TestServeWithoutBPF(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	top, dirs := testenv.Cgroups(t, "app")
	p := startWrapped(t, nil, []string{setpriv, "--inh-caps=-bpf,-sys_admin", "--bounding-set=-bpf,-sys_admin"},
		"--collector.cgroup.perf-mode="+top+"/app")
	var steal0, wall time.Duration
	var usage map[string]float64
	before, mfs, _ := p.measureRun(t, func() {
		usage = usageGrowth(t, dirs, func() {
			var started time.Time
			steal0, started = testenv.Stolen(t), time.Now()
			testenv.BurnIn(t, dirs[0], 500*time.Millisecond).Wait()
			wall = time.Since(started)
		})
	})
	got := grown(t, before, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": top + "/app", "event": "cpu-clock"})
	// perf's clock runs on while the hypervisor steals the CPU and through
	// part of each switch, cpu.stat's does not (testenv.ClockCeiling).
	steal := float64(testenv.StolenSince(t, steal0))
	t.Logf("perf cgroup mode cpu-clock %v, cpu.stat %v (%.1f%%), up to %v stolen", time.Duration(got), time.Duration(usage[dirs[0]]), 100*got/usage[dirs[0]], time.Duration(steal))
	if got < 0.97*usage[dirs[0]] || got > testenv.ClockCeiling(t, usage[dirs[0]], steal0, 0, wall) {
		t.Errorf("perf cgroup mode cpu-clock %v, cpu.stat %v, %v stolen meanwhile", time.Duration(got), time.Duration(usage[dirs[0]]), time.Duration(steal))
	}
	if fds := mustValue(t, mfs, "pmu_cgroup_perf_mode_fds", nil); fds < float64(len(testenv.OnlineCPUs(t))*2) {
		t.Errorf("perf mode fds %v", fds)
	}
	if v := mustValue(t, mfs, "pmu_capability", map[string]string{"feature": "cgroup_attribution"}); v != 0 {
		t.Errorf("cgroup_attribution = %v without CAP_BPF", v)
	}
	if v := mustValue(t, mfs, "pmu_events_total", sw("cpu-clock")); v <= 0 {
		t.Errorf("node cpu-clock %v: node counting must not depend on BPF", v)
	}
	if _, ok := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": "/"}); ok {
		t.Error("a cgroup outside the allow-list is exported without the eBPF attribution")
	}
	if !strings.Contains(p.log.String(), "per-cgroup attribution not running") || !strings.Contains(p.log.String(), "CAP_BPF") {
		t.Errorf("log does not say why attribution is off:\n%s", p.log)
	}
}

// TestServeAPIServerUnreachable: with pod names asked for but no API server,
// the exporter serves, counts the failures, says so, and cgroup series keep
// UIDs.
func TestServeAPIServerUnreachable(t *testing.T) {
	testenv.RequireRoot(t)
	kubeconfig := kubeconfigFor(t, "http://127.0.0.1:1")
	p := start(t, nil, "--kubernetes.node-name=node-a", "--kubernetes.kubeconfig="+kubeconfig)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, mfs := p.scrape(t)
		if v, ok := value(t, mfs, "pmu_kubernetes_api_errors_total", nil); ok && v > 0 {
			if s := mustValue(t, mfs, "pmu_kubernetes_pods_synced", nil); s != 0 {
				t.Errorf("synced = %v without an API server", s)
			}
			if v := mustValue(t, mfs, "pmu_events_total", sw("cpu-clock")); v <= 0 {
				t.Errorf("node cpu-clock %v", v)
			}
			if _, ok := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": "/", "event": "cpu-clock"}); !ok {
				t.Error("no per-cgroup series without the API server")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no API errors counted in 10 s\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(p.log.String(), "cannot list or watch this node's pods") {
		t.Errorf("log does not say the API server is unreachable:\n%s", p.log)
	}
}

// TestServeCgroupV1 binds perf_event to a cgroup v1 hierarchy, as on hosts
// still booted with v1, lays a pod out in it, and runs the exporter with its
// defaults: it finds the hierarchy in mountinfo, attributes in v1 mode, and a
// container's series carry its pod and container and its process's CPU time
// (wait4's rusage) within 3%.
func TestServeCgroupV1(t *testing.T) {
	pod := "kubepods/burstable/pod" + e2ePod
	mnt, dirs := testenv.PerfEventV1(t, "kubepods", "kubepods/burstable", pod, pod+"/"+e2eCtrA)
	p := start(t, nil)
	var steal0, wall time.Duration
	var used float64
	before, mfs, _ := p.measureRun(t, func() {
		var started time.Time
		steal0, started = testenv.Stolen(t), time.Now()
		w := testenv.InCgroupV1(dirs[3], "timeout", "0.3", "sh", "-c", "while :; do :; done")
		if err := w.Run(); err != nil && w.ProcessState.ExitCode() != 124 {
			t.Fatal(err)
		}
		wall = time.Since(started)
		ru := w.ProcessState.SysUsage().(*syscall.Rusage)
		used = float64(ru.Utime.Nano() + ru.Stime.Nano())
	})
	got := grown(t, before, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": "/" + pod + "/" + e2eCtrA, "event": "cpu-clock", "pod": e2ePod, "container": e2eCtrA, "namespace": ""})
	unseen := grown(t, before, mfs, "pmu_cgroup_unattributed_events_total", map[string]string{"event": "cpu-clock"})
	t.Logf("attributed %v, the process ran %v, unattributed %v", time.Duration(got), time.Duration(used), time.Duration(unseen))
	// perf's clock runs on while the hypervisor steals the CPU and through
	// part of each switch, rusage's does not (testenv.ClockCeiling).
	if got > testenv.ClockCeiling(t, used, steal0, 2*time.Millisecond, wall) || got < 0.97*used-2e6-unseen {
		t.Errorf("attributed cpu-clock %v, the process ran %v", time.Duration(got), time.Duration(used))
	}
	if !strings.Contains(p.log.String(), "v1 perf_event hierarchy at "+mnt) {
		t.Errorf("the log does not say attribution runs on the v1 hierarchy:\n%s", p.log)
	}
}

// TestServeQuickHotplug takes a CPU offline and back 20 times while the
// exporter runs with --collector.counting.per-cpu, each time faster than it polls
// the online list, and without the kernel's hotplug uevents, which would
// tell it (TestServeHotplugUevents). After every toggle the CPU's cpu-clock must count again
// (two intervals should do; 5 s are given); afterwards a task pinned to that CPU in a cgroup is
// credited its cpu.stat time (the cgroup program was reattached there and
// the counting fds placed anew), and pmu_cpu_reopened_total says what was
// done. No CPU may total more cpu-clock than the wall time that passed.
func TestServeQuickHotplug(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t) // holds the machine: testenv.Cgroups would deadlock
	mnt := testenv.Cgroup2Mount()
	testenv.Require(t, mnt != "", "needs a cgroup v2 hierarchy")
	dir := filepath.Join(mnt, fmt.Sprintf("pmu_exporter_test_%d_hotplug", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	online := testenv.OnlineCPUs(t)
	label := strconv.Itoa(cpu)

	started := time.Now()
	p := start(t, nil, "--collector.counting.per-cpu", "--no-collector.counting.hotplug-uevents")
	clock := func() float64 {
		_, mfs := p.scrape(t)
		return mustValue(t, mfs, "pmu_events_total", map[string]string{"event": "cpu-clock", "pmu": "software", "cpu": label})
	}
	// Another process taking a CPU offline during a toggle's measurement
	// (hotplugtest.Watch) is not the exporter's doing: one more toggle.
	for i, judged := 0, 0; judged < 20; i++ {
		if i == 30 {
			t.Fatalf("another process took CPUs offline during %d of %d toggles", i-judged, i)
		}
		testenv.AwaitPresentOnline(t, 5*time.Second)
		for _, v := range []string{"0", "1"} {
			if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Two 100 ms intervals should do; a machine busy enough to hold
		// the exporter off its CPU for longer gets 5 s (seen under
		// scripts/noisy: nothing counted 250 ms after a toggle).
		w := hotplugtest.Start(t)
		var d float64
		for deadline := time.Now().Add(5 * time.Second); d < 0.1e9 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			c0 := clock()
			time.Sleep(200 * time.Millisecond)
			d = clock() - c0
		}
		off := w.Offlined(t)
		w.Stop()
		switch {
		case d >= 0.1e9:
			judged++
		case off >= 0:
			t.Logf("toggle %d: CPU %d went offline or came online during it (another process): toggling again", i, off)
		default:
			t.Fatalf("toggle %d: CPU %d counted %v of cpu-clock in 200ms, 5 s after coming back\n%s", i, cpu, time.Duration(d), p.log)
		}
	}
	// What the task pinned there gets, and what cpu.stat says it ran, in
	// a run no other process hotplugged a CPU in.
	path := strings.TrimPrefix(dir, mnt)
	var got, usage, unseen float64
	var steal0 time.Duration
	var burn time.Duration
	hotplugtest.Measure(t, func(int) {
		p.awaitEveryCPU(t)
		_, mfs := p.scrape(t)
		got0, _ := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": path, "event": "cpu-clock"})
		unseen0 := mustValue(t, mfs, "pmu_cgroup_unattributed_events_total", map[string]string{"event": "cpu-clock"})
		usage0 := float64(testenv.CgroupUsage(t, dir))
		var burnt time.Time
		steal0, burnt = testenv.Stolen(t), time.Now()
		w := testenv.BurnIn(t, dir, 400*time.Millisecond)
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(w.Process.Pid, &set); err != nil {
			w.Wait()
			t.Logf("pinning to CPU %d: %v", cpu, err) // offline: Measure runs it again
			return
		}
		w.Wait()
		burn = time.Since(burnt)
		time.Sleep(350 * time.Millisecond)
		_, mfs = p.scrape(t)
		got = mustValue(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": path, "event": "cpu-clock"}) - got0
		usage = float64(testenv.CgroupUsage(t, dir)) - usage0
		unseen = mustValue(t, mfs, "pmu_cgroup_unattributed_events_total", map[string]string{"event": "cpu-clock"}) - unseen0
	})
	_, mfs := p.scrape(t)
	wall := float64(time.Since(started))
	// perf's clock runs on while the hypervisor steals the CPU and through
	// part of each switch, cpu.stat's does not (testenv.ClockCeiling).
	if got > testenv.ClockCeiling(t, usage, steal0, 0, burn) || got < 0.97*usage-unseen || usage == 0 {
		t.Errorf("a task pinned to CPU %d after the toggles: attributed %v, cpu.stat %v, unattributed %v", cpu, time.Duration(got), time.Duration(usage), time.Duration(unseen))
	}
	if v, _ := value(t, mfs, "pmu_cpu_reopened_total", map[string]string{"cpu": label}); v < 1 {
		t.Errorf("pmu_cpu_reopened_total{cpu=%q} = %v after 20 quick toggles", label, v)
	}
	for _, c := range online {
		if v := mustValue(t, mfs, "pmu_events_total", map[string]string{"event": "cpu-clock", "pmu": "software", "cpu": strconv.Itoa(c)}); v > wall {
			t.Errorf("CPU %d counted %v of cpu-clock in %v", c, time.Duration(v), time.Duration(wall))
		}
	}
	if !strings.Contains(p.log.String(), "the events of a CPU stopped counting; reopened every group there") || !strings.Contains(p.log.String(), "cpu="+label) {
		t.Errorf("the log does not name the CPU and the cause:\n%s", p.log)
	}
}

// TestServeHotplugUevents: with its reads an hour apart, the exporter
// follows a CPU's hotplug by the kernel's uevents alone. Taken offline,
// the CPU's groups close; brought back, they open within milliseconds,
// so that the CPU's cpu-clock, read when it goes offline again, counts
// nearly all of the time it was online, and never more. A round in which
// another process hotplugged a CPU is done again (five at most).
func TestServeHotplugUevents(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	online := len(testenv.OnlineCPUs(t))
	// Its first read opens the groups; the next is an hour away, and the
	// exporter is not ready before it.
	p := startWrapped(t, nil, []string{unready}, "--collector.counting.per-cpu", "--collector.counting.interval=1h")
	label := strconv.Itoa(cpu)
	set := func(v string) {
		t.Helper()
		if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// await waits up to 10 s until the group is open on n CPUs, and
	// returns the CPU's cpu-clock then.
	await := func(n int) float64 {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			_, mfs := p.scrape(t)
			var open []float64
			for _, m := range mfs["pmu_group_cpus"].GetMetric() {
				open = append(open, m.GetGauge().GetValue())
			}
			clock, _ := value(t, mfs, "pmu_events_total", map[string]string{"event": "cpu-clock", "pmu": "software", "cpu": label})
			if len(open) > 0 && !slices.ContainsFunc(open, func(v float64) bool { return v != float64(n) }) {
				return clock
			}
			if time.Now().After(deadline) {
				t.Fatalf("the groups are open on %v CPUs 10 s after a hotplug, want %d\n%s", open, n, p.log)
			}
		}
	}
	await(online)
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatalf("another process hotplugged CPUs during %d rounds", round)
		}
		testenv.AwaitPresentOnline(t, 5*time.Second)
		set("0")
		c0 := await(online - 1)
		from := time.Now()
		set("1")
		w := hotplugtest.Start(t)
		await(online)
		time.Sleep(300 * time.Millisecond)
		if w.Saw(t, fmt.Sprintf("round %d again", round)) {
			continue
		}
		set("0")
		window := float64(time.Since(from))
		counted := await(online-1) - c0
		set("1")
		if counted > window || counted < 0.5*window {
			t.Errorf("CPU %d counted %v of cpu-clock while online %v", cpu, time.Duration(counted), time.Duration(window))
		}
		t.Logf("CPU %d counted %v of cpu-clock while online %v", cpu, time.Duration(counted), time.Duration(window))
		return
	}
}

// TestServeAttributionRepeated is the operator's check of per-cgroup
// attribution, 10 times in a row, on an idle machine and again while another
// cgroup keeps every CPU busy: two busy loops start together in two
// containers of a pod (0.6 s and 0.3 s), and once they have ended and the
// exporter has read again, each container's task-clock is within 3% of its
// cpu.stat usage. Before the switch credit moved to sched_switch and unseen
// switches were split at the task's arrival, up to a third of a loop went
// unattributed in one run out of four: 20 runs miss a fault that frequent
// with a chance of 0.3%. (It ran 20 times each way, 40 s of the suite's
// largest package, until 2026-11-29.)
func TestServeAttributionRepeated(t *testing.T) {
	const runs = 10
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "busy"}[busy], func(t *testing.T) {
			var rels []string
			for i := range runs {
				pod := fmt.Sprintf("kubepods/pod%d", i)
				rels = append(rels, pod, pod+"/a", pod+"/b")
			}
			top, dirs := testenv.Cgroups(t, append([]string{"hog", "kubepods"}, rels...)...)
			p := start(t, nil)
			if busy {
				for range 2 * len(testenv.OnlineCPUs(t)) {
					h := testenv.BurnIn(t, dirs[0], time.Minute)
					t.Cleanup(func() { h.Process.Kill(); h.Wait() })
				}
			}
			rel := func(dir string) string {
				return top + strings.TrimPrefix(dir, filepath.Join(testenv.Cgroup2Mount(), top))
			}
			failed := 0
			for i := range runs {
				a, b := dirs[2+3*i+1], dirs[2+3*i+2]
				// Each try burns in fresh containers' worth of time
				// (measureRun).
				var steal0 time.Duration
				var wall map[string]time.Duration
				var usage map[string]float64
				before, mfs, _ := p.measureRun(t, func() {
					usage = usageGrowth(t, []string{a, b}, func() {
						var started time.Time
						steal0, started = testenv.Stolen(t), time.Now()
						wa, wb := testenv.BurnIn(t, a, 600*time.Millisecond), testenv.BurnIn(t, b, 300*time.Millisecond)
						wb.Wait()
						wall = map[string]time.Duration{b: time.Since(started)}
						wa.Wait()
						wall[a] = time.Since(started)
					})
				})
				run := grown(t, before, mfs, "pmu_cgroup_unattributed_events_total", map[string]string{"event": "task-clock"})
				for _, dir := range []string{a, b} {
					got := grown(t, before, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": rel(dir), "event": "task-clock"})
					usage := usage[dir]
					// 5 ms for the time a switch costs on either side of
					// each of a busy run's ~50 switches: perf's clock runs
					// through it, cpu.stat's stops at the pick; and through
					// what the hypervisor stole (testenv.ClockCeiling).
					if got < 0.97*usage-run-5e6 || got > testenv.ClockCeiling(t, usage, steal0, 5*time.Millisecond, wall[dir]) {
						failed++
						t.Errorf("run %d, %s: attributed %v of task-clock, cpu.stat %v, unattributed in the run %v", i, filepath.Base(dir), time.Duration(got), time.Duration(usage), time.Duration(run))
					} else if got < 0.97*usage {
						t.Logf("run %d, %s: attributed %v of task-clock, cpu.stat %v: short by more than 3%%, within what the run left unattributed (%v)", i, filepath.Base(dir), time.Duration(got), time.Duration(usage), time.Duration(run))
					}
				}
			}
			if failed > 0 {
				t.Logf("%d of %d containers off by more than 3%%\n%s", failed, 2*runs, p.log)
			}
		})
	}
}

// TestServeShortLivedCgroups: cgroups that come and go within one read
// interval (a job's step, a probe's exec) cannot be named once gone, so
// get no series of their own; their time is counted under cgroup="gone"
// (issue 56: 243 of 500 such cgroups appeared only in their parent, with
// nothing counting the remainder). What the churned cgroups were credited
// (gone, and the series of those the exporter named while they lived)
// covers the CPU time the kernel accounted them (cpu.stat, read before
// each was removed), less what went unattributed meanwhile. Other
// processes' cgroups may be gone too: only a floor is asserted.
func TestServeShortLivedCgroups(t *testing.T) {
	top, dirs := testenv.Cgroups(t, "churn")
	p := start(t, nil, "--collector.counting.interval=2s")
	gone := func(mfs map[string]*dto.MetricFamily) float64 {
		v, _ := value(t, mfs, "pmu_cgroup_events_total", map[string]string{"cgroup": "gone", "event": "cpu-clock"})
		return v
	}
	named := func(mfs map[string]*dto.MetricFamily) (sum float64) {
		for _, m := range mfs["pmu_cgroup_events_total"].GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if strings.HasPrefix(l["cgroup"], top+"/churn/") && l["event"] == "cpu-clock" {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	var usage float64
	before, after, _ := p.measureRun(t, func() {
		usage = 0
		for i := range 20 {
			dir := filepath.Join(dirs[0], fmt.Sprint("job-", i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.BurnIn(t, dir, 40*time.Millisecond).Wait()
			usage += float64(testenv.CgroupUsage(t, dir))
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(4500 * time.Millisecond) // two 2 s reads after the last
	})
	credited := gone(after) - gone(before) + named(after) - named(before)
	unseen := grown(t, before, after, "pmu_cgroup_unattributed_events_total", map[string]string{"event": "cpu-clock"})
	t.Logf("20 cgroups of 40 ms: cpu.stat %v; credited %v (gone %v), unattributed %v", time.Duration(usage), time.Duration(credited), time.Duration(gone(after)-gone(before)), time.Duration(unseen))
	if credited < 0.9*usage-unseen {
		t.Errorf("short-lived cgroups credited %v of the %v cpu.stat accounted them", time.Duration(credited), time.Duration(usage))
	}
}
