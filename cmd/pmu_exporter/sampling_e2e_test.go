package main

import (
	bin "encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// TestServeSampling: with page faults sampled at every fault, the samples
// the exporter reports grow by at least the faults this test makes, and the
// period stays 1 unless the machine faulted fast enough to raise it; the
// output passes promtool, and /debug/cachelines answers (with no memory
// PMU here its table stays empty) and refuses a bad n.
func TestServeSampling(t *testing.T) {
	testenv.RequireRoot(t)
	promtool := testenv.RequireTool(t, "promtool")
	faults0 := pageFaults(t)
	p := start(t, nil, "--collector.sampling.event=page-faults", "--collector.sampling.period=1", "--collector.sampling.cpu-budget=1", "--web.enable-debug")
	ev := map[string]string{"event": "page-faults", "pmu": "software"}
	_, before := p.scrape(t)
	b0 := mustValue(t, before, "pmu_sampling_samples_total", ev)
	const pages = 2000
	mem := testenv.FreshPages(t, pages)
	for i := range pages {
		mem[i*os.Getpagesize()] = 1
	}
	time.Sleep(600 * time.Millisecond) // two of the reader's poll periods
	body, after := p.scrape(t)
	grew := mustValue(t, after, "pmu_sampling_samples_total", ev) + mustValue(t, after, "pmu_sampling_lost_total", ev) - b0
	period := mustValue(t, after, "pmu_sampling_period_events", ev)
	// The governor raises a period only where samples come faster than
	// half of perf_event_max_sample_rate on a CPU over one of its 500 ms
	// intervals, or cost more than the budget, which takes more still. A
	// neighbour faulting pages does that, and then the test's own faults
	// are no longer each a sample; fewer faults than one interval needs, in
	// the exporter's whole life, cannot.
	faults := float64(pageFaults(t) - faults0)
	trip := readSysctl(t, "kernel/perf_event_max_sample_rate") / 2 * 0.5 * float64(len(testenv.OnlineCPUs(t)))
	if faults >= trip {
		t.Logf("period %v, samples grew by %.0f: the machine faulted %.0f pages while the exporter ran, enough to raise the period (%.0f); neither judged", period, grew, faults, trip)
	} else {
		if period != 1 {
			t.Errorf("period %v with a budget of a whole CPU, while the machine faulted %.0f pages, fewer than raise it (%.0f)", period, faults, trip)
		}
		if grew < pages {
			t.Errorf("samples grew by %.0f, the test faulted %d pages", grew, pages)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	resp, err := http.Get("http://" + p.addr + "/debug/cachelines?n=5")
	if err != nil {
		t.Fatal(err)
	}
	var r cacheline.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.Lines == nil {
		t.Errorf("/debug/cachelines: %s, %v", resp.Status, err)
	}
	resp.Body.Close()
	resp, err = http.Get("http://" + p.addr + "/debug/cachelines?n=-1")
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(msg), "n:") {
		t.Errorf("bad n: %s %q", resp.Status, msg)
	}
}

// pageFaults is the machine's page faults so far (/proc/vmstat pgfault).
func pageFaults(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "pgfault "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/vmstat: pgfault %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("/proc/vmstat has no pgfault")
	return 0
}

// readSysctl is the number in /proc/sys/name.
func readSysctl(t *testing.T, name string) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		t.Fatalf("/proc/sys/%s: %v", name, err)
	}
	return v
}

// onCPU0 runs start (which forks) on a thread bound to CPU 0, so that the
// child and its children run there alone (they inherit the affinity).
func onCPU0(start func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(0)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	return start()
}

// TestServeSamplingPerCgroup: a process started inside a test cgroup
// faults its pages; the page-fault samples the exporter attributes to that
// cgroup (PERF_SAMPLE_CGROUP) equal the kernel's own count of page faults
// in that cgroup (a page-faults counter in perf's cgroup mode on every CPU).
func TestServeSamplingPerCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	top, dirs := testenv.Cgroups(t, "job")
	p := start(t, nil, "--collector.sampling.event=page-faults", "--collector.sampling.period=1", "--collector.sampling.cpu-budget=1", "--collector.sampling.ring-pages=256")
	f, err := os.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var counters []int
	for _, cpu := range testenv.OnlineCPUs(t) {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
		fd, err := unix.PerfEventOpen(&attr, int(f.Fd()), cpu, -1, unix.PERF_FLAG_PID_CGROUP|unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			t.Fatalf("page-faults of the cgroup on CPU %d: %v", cpu, err)
		}
		defer unix.Close(fd)
		counters = append(counters, fd)
	}
	// On CPU 0 alone, which cannot go offline here: a CPU that another
	// process takes offline and back is sampled again only once the
	// exporter follows it, while the test's counter counts there at once.
	cmd := exec.Command("sh", "-c", "head -c 20000000 /dev/zero | cat > /dev/null")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	if err := onCPU0(func() error { return cmd.Start() }); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, fd := range counters {
		var b [8]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			t.Fatal(err)
		}
		counted += float64(bin.LittleEndian.Uint64(b[:]))
	}
	time.Sleep(600 * time.Millisecond) // two of the reader's poll periods
	_, mfs := p.scrape(t)
	lbl := map[string]string{"cgroup": top + "/job", "event": "page-faults"}
	got := mustValue(t, mfs, "pmu_cgroup_sampling_samples_total", lbl)
	lost := mustValue(t, mfs, "pmu_sampling_lost_total", map[string]string{"event": "page-faults"})
	if got != counted || lost != 0 || counted < 100 {
		t.Errorf("%.0f page-fault samples in %s (%.0f lost), the kernel counted %.0f page faults there", got, lbl["cgroup"], lost, counted)
	}
}
