package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/crypto/bcrypt"

	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// binary is the exporter built once for the package's tests, in a directory an
// unprivileged user can read; with PMU_EXPORTER_E2E_RACE=1 it is built with
// the race detector, and a race it reports fails the test that ran it (the
// binary exits 66 at SIGTERM).
var binary string

// prebuiltEnv names a directory holding the exporter and the ground-truth
// programs already built for the machine the tests run on, where no Go
// toolchain is (scripts/arm64-vm's emulated arm64 machine).
const prebuiltEnv = "PMU_EXPORTER_PREBUILT"

func TestMain(m *testing.M) {
	if code, ok := pingPongHelper(); ok {
		os.Exit(code) // a process of BenchmarkSwitchHeavyWorkload's workload
	}
	if dir := os.Getenv(prebuiltEnv); dir != "" {
		binary = filepath.Join(dir, "pmu_exporter")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "pmu_exporter_e2e")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755)
	binary = filepath.Join(dir, "pmu_exporter")
	build := []string{"build", "-o", binary}
	if os.Getenv("PMU_EXPORTER_E2E_RACE") == "1" {
		build = append(build, "-race")
	}
	out, err := exec.Command("go", append(build, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the exporter: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type exporterProc struct {
	addr string
	cmd  *exec.Cmd
	log  *logBuffer
	// stopped is terminate's outcome, once: how long the exporter took to
	// exit after SIGTERM, and why it did not exit cleanly.
	stopped   sync.Once
	stopTook  time.Duration
	stopError error
}

// terminate sends SIGTERM and waits up to limit for the exporter to exit
// (killing it after); the first call's outcome is every call's.
func (p *exporterProc) terminate(limit time.Duration) (time.Duration, error) {
	p.stopped.Do(func() {
		start := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			p.stopTook = time.Since(start)
			if err != nil {
				p.stopError = fmt.Errorf("exporter did not exit cleanly on SIGTERM: %w", err)
			}
		case <-time.After(limit):
			p.stopTook = time.Since(start)
			p.cmd.Process.Kill()
			<-done
			p.stopError = fmt.Errorf("exporter still running %v after SIGTERM", limit)
		}
	})
	return p.stopTook, p.stopError
}

// logBuffer holds what a process wrote: exec's copying goroutine writes it
// while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail is the log's last n bytes at most.
func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b.Bytes()
	return string(b[max(len(b)-n, 0):])
}

// start runs the binary with args and waits until /-/ready answers 200, which
// it must not do before the first counts are read.
func start(t *testing.T, cred *syscall.Credential, args ...string) *exporterProc {
	t.Helper()
	return startWrapped(t, cred, nil, args...)
}

// unready, as a wrapper word, makes startWrapped wait for /-/healthy only: for
// an exporter that measures nothing and so is never ready.
const unready = "<unready>"

// startWrapped is start with the binary run by a wrapper command (setpriv ...).
func startWrapped(t *testing.T, cred *syscall.Credential, wrapper []string, args ...string) *exporterProc {
	t.Helper()
	p := &exporterProc{addr: testenv.FreeAddr(t), log: &logBuffer{}}
	probe := "/-/ready"
	if slices.Contains(wrapper, unready) {
		probe = "/-/healthy"
	}
	wrapper = slices.DeleteFunc(slices.Clone(wrapper), func(w string) bool { return w == unready })
	argv := append(wrapper, binary, "--web.listen-address="+p.addr)
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--collector.counting.interval=") }) {
		argv = append(argv, "--collector.counting.interval=100ms")
	}
	argv = append(argv, args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if cred != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // what the exporter said, for a failure on a noisy machine
			t.Logf("the exporter's log:\n%s", p.log.tail(8<<10))
		}
		if _, err := p.terminate(10 * time.Second); err != nil {
			t.Errorf("%v\n%s", err, p.log)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.addr + probe)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("exporter not ready in 10s:\n%s", p.log)
	return nil
}

func (p *exporterProc) scrape(t *testing.T) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %s\n%s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing scrape: %v", err)
	}
	return string(body), mfs
}

// awaitEveryCPU waits (2 s at most) until the exporter has every group open
// on every online CPU: a CPU that came online is attached at the next
// read, and what runs there before is counted nowhere (docs/metrics.md,
// pmu_group_cpus). A test that has just seen another process bring a CPU
// back measures only after that.
func (p *exporterProc) awaitEveryCPU(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, mfs := p.scrape(t)
		online, all := float64(len(testenv.OnlineCPUs(t))), true
		for _, m := range mfs["pmu_group_cpus"].GetMetric() {
			all = all && m.GetGauge().GetValue() == online
		}
		if all {
			return
		}
	}
}

// value finds the series of name whose labels include all of want.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func mustValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := value(t, mfs, name, labels)
	if !ok {
		t.Fatalf("no %s%v in scrape", name, labels)
	}
	return v
}

func sw(event string) map[string]string { return map[string]string{"event": event, "pmu": "software"} }

// TestServeGrowsWithLoad: a newcomer's run, scraped twice around some load; the
// counts grow by at least the load we made, and promtool accepts the output.
func TestServeGrowsWithLoad(t *testing.T) {
	testenv.RequireRoot(t)
	promtool := testenv.RequireTool(t, "promtool")
	p := start(t, nil)
	_, before := p.scrape(t)
	if _, ok := value(t, before, "pmu_events_total", sw("cpu-clock")); !ok {
		t.Fatal("ready before any count was read")
	}

	const pages = 3000
	mem := testenv.FreshPages(t, pages)
	for i := 0; i < pages; i++ {
		mem[i*os.Getpagesize()] = 1
	}
	spinStart := time.Now()
	for time.Since(spinStart) < 200*time.Millisecond {
	}
	time.Sleep(300 * time.Millisecond) // more than two read intervals
	body, after := p.scrape(t)

	if d := mustValue(t, after, "pmu_events_total", sw("page-faults")) - mustValue(t, before, "pmu_events_total", sw("page-faults")); d < pages {
		t.Errorf("page-faults grew by %v, less than the %d pages touched", d, pages)
	}
	// System-wide cpu-clock counts wall time on every CPU: at least 500ms × CPUs passed.
	cpus := float64(len(strings.Split(strings.TrimSpace(readFile(t, "/sys/devices/system/cpu/online")), ","))) // lower bound only
	if d := mustValue(t, after, "pmu_events_total", sw("cpu-clock")) - mustValue(t, before, "pmu_events_total", sw("cpu-clock")); d < 0.4e9*cpus {
		t.Errorf("cpu-clock grew by %v ns over ~0.5s", d)
	}
	if v := mustValue(t, after, "pmu_capability", map[string]string{"feature": "system_wide"}); v != 1 {
		t.Errorf("system_wide capability = %v as root", v)
	}
	for _, name := range []string{"pmu_info", "pmu_group_enabled_seconds_total", "pmu_group_running_seconds_total",
		"pmu_read_errors_total", "pmu_read_duration_seconds", "pmu_build_info"} {
		if after[name] == nil {
			t.Errorf("%s missing from /metrics", name)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// The landing page and health probe.
	for path, want := range map[string]string{"/": "PMU Exporter", "/-/healthy": "Healthy"} {
		resp, err := http.Get("http://" + p.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %s %q", path, resp.Status, b)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeUnprivileged: without permission the exporter still serves, says what
// is missing, and counts nothing system-wide.
func TestServeUnprivileged(t *testing.T) {
	testenv.RequireRoot(t)
	paranoid := strings.TrimSpace(readFile(t, "/proc/sys/kernel/perf_event_paranoid"))
	testenv.Require(t, paranoid != "-1" && paranoid != "0", "perf_event_paranoid lets anyone count system-wide")
	p := startWrapped(t, &syscall.Credential{Uid: 65534, Gid: 65534}, []string{unready}, "--collector.sampling.event=page-faults")
	time.Sleep(300 * time.Millisecond)
	_, mfs := p.scrape(t)
	// Alive, but measuring nothing: not ready, and it says why.
	resp, err := http.Get("http://" + p.addr + "/-/ready")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "no event group could be opened (permission on") {
		t.Errorf("/-/ready of an exporter that may open nothing: %s %q", resp.Status, b)
	}
	// Sampling cannot open either: said in the log with the fix, and no
	// sampling series pretend otherwise.
	if !strings.Contains(p.log.String(), `msg="sampling event not opened" event=page-faults`) || !strings.Contains(p.log.String(), "no sampling event could be opened") {
		t.Errorf("log does not say sampling failed:\n%s", p.log)
	}
	if _, ok := value(t, mfs, "pmu_sampling_samples_total", map[string]string{"event": "page-faults"}); ok {
		t.Error("page-faults sampling exported although it could not be opened")
	}
	if v := mustValue(t, mfs, "pmu_capability", map[string]string{"feature": "system_wide"}); v != 0 {
		t.Errorf("system_wide = %v for nobody", v)
	}
	if v := mustValue(t, mfs, "pmu_group_open_failures", map[string]string{"group": "software", "reason": "permission"}); v < 1 {
		t.Errorf("software group permission failures = %v", v)
	}
	if _, ok := value(t, mfs, "pmu_events_total", sw("cpu-clock")); ok {
		t.Error("cpu-clock exported although it could not be opened")
	}
	if !strings.Contains(p.log.String(), "CAP_PERFMON") {
		t.Errorf("log does not say how to fix permissions:\n%s", p.log)
	}
	// A collector that opened nothing has not succeeded (issue 56: the
	// platform collector said 1 with nothing open).
	for _, m := range mfs["pmu_collector_success"].GetMetric() {
		if m.GetGauge().GetValue() != 0 {
			t.Errorf("pmu_collector_success%v = 1 for nobody, who may open nothing system-wide", m.GetLabel())
		}
	}
}

// TestServeBadConfigKeepsGoodGroups: a config with one bad event still counts the
// rest, exports pmu_config_errors, and logs file:line:column.
func TestServeBadConfigKeepsGoodGroups(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := filepath.Join(t.TempDir(), "pmu.yml")
	os.WriteFile(cfg, []byte("default_profile: false\ngroups:\n  - name: faults\n    events: [minor-faults]\n  - name: broken\n    events: [cyclez]\n"), 0o644)
	p := start(t, nil, "--config.file="+cfg)
	time.Sleep(200 * time.Millisecond)
	_, mfs := p.scrape(t)
	if v := mustValue(t, mfs, "pmu_config_errors", nil); v != 1 {
		t.Errorf("pmu_config_errors = %v", v)
	}
	if _, ok := value(t, mfs, "pmu_events_total", sw("minor-faults")); !ok {
		t.Error("the good group is not counted")
	}
	if _, ok := value(t, mfs, "pmu_events_total", sw("cpu-clock")); ok {
		t.Error("default profile counted although default_profile is false")
	}
	if want := cfg + `:6:14: event \"cyclez\": unknown event \"cyclez\"; did you mean \"cycles\"?`; !strings.Contains(p.log.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, p.log)
	}
	// check judges the same configuration: it says what will not be
	// counted, and exits 1 (issue 56: it said so and exited 0).
	out, err := exec.Command(binary, "check", "--config.file="+cfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "Configuration problems (these groups will not be counted)") {
		t.Errorf("check of a configuration with a bad group: %v\n%s", err, out)
	}
}

// TestPathFlagsNamingTheWrongThing: a path flag that names something
// other than what it is for stops serve, check and validate at start
// (exit 2) with the flag, the path and what is missing there, rather
// than a report about none of the CPUs or a cgroup hierarchy at /proc.
func TestPathFlagsNamingTheWrongThing(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(garbage, []byte("not: [a kubeconfig"), 0o644)
	for _, c := range []struct{ flag, says string }{
		{"--path.sysfs=/nonexistent", "--path.sysfs=/nonexistent is not a sysfs: no devices/system/cpu/online there"},
		{"--path.procfs=/sys", "--path.procfs=/sys is not a procfs: no self/stat there"},
		{"--path.cgroupfs=/proc", "--path.cgroupfs=/proc is not a cgroup hierarchy: no cgroup.procs there"},
		{"--config.file=/nonexistent.yaml", "--config.file: stat /nonexistent.yaml: no such file or directory"},
		{"--config.file=/proc", "--config.file=/proc is not a regular file"},
	} {
		for _, cmd := range [][]string{{c.flag}, {"check", c.flag}, {"validate", "--quick", c.flag}} {
			out, err := exec.Command(binary, cmd...).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.says) {
				t.Errorf("%v: %v\n%s", cmd, err, out)
			}
		}
	}
	out, err := exec.Command(binary, "--kubernetes.node-name=n", "--kubernetes.kubeconfig="+garbage).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--kubernetes.kubeconfig="+garbage+": kubernetes client configuration") {
		t.Errorf("a kubeconfig that is none: %v\n%s", err, out)
	}
}

func TestServeBasicAuth(t *testing.T) {
	testenv.RequireRoot(t)
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	web := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(web, []byte("basic_auth_users:\n  prom: "+string(hash)+"\n"), 0o644)
	p := &exporterProc{addr: testenv.FreeAddr(t), log: &logBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	p.cmd = exec.CommandContext(ctx, binary, "--web.listen-address="+p.addr, "--web.config.file="+web)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); p.cmd.Wait() }()
	var resp *http.Response
	var err error
	for i := 0; i < 100; i++ {
		if resp, err = http.Get("http://" + p.addr + "/metrics"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, p.log)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without credentials: %s", resp.Status)
	}
	req, _ := http.NewRequest("GET", "http://"+p.addr+"/metrics", nil)
	req.SetBasicAuth("prom", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("with credentials: %s", resp.Status)
	}
}

// TestCheck runs `pmu_exporter check` both ways.
func TestCheck(t *testing.T) {
	testenv.RequireRoot(t)
	out, err := exec.Command(binary, "check", "--format=json").Output()
	if err != nil {
		t.Fatalf("check --format=json: %v", err)
	}
	var r struct {
		Runnable bool
		Features []struct {
			Name      string
			Available bool
			Reason    string
			Fix       string
		}
		PMUs    []struct{ Name string }
		Groups  []string
		Topdown struct {
			Trees  []struct{ Tree, Source string }
			Reason string
		}
		MemorySampling struct {
			Events  []string
			Missing []struct{ What, Why string }
		} `json:"memory_sampling"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Every key is snake_case, as in the rest of the JSON this tool writes.
	var anyJSON any
	json.Unmarshal(out, &anyJSON)
	for _, k := range jsonKeys(anyJSON, "") {
		if strings.ToLower(k) != k {
			t.Errorf("check --format=json: key %s is not snake_case", k)
		}
	}
	// The collectors as serve would run them, from the same flags.
	for _, args := range [][]string{{}, {"--no-collector.cgroup"}} {
		out, err := exec.Command(binary, append([]string{"check", "--format=json"}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Collectors []struct {
				Name          string
				Enabled, Runs bool
				Reason        string
			}
		}
		json.Unmarshal(out, &c)
		got := map[string]bool{}
		for _, col := range c.Collectors {
			got[col.Name] = col.Enabled
			if col.Enabled && !col.Runs && col.Reason == "" {
				t.Errorf("check %v: collector %s does not run, without a reason", args, col.Name)
			}
		}
		if want := map[string]bool{"counting": true, "topdown": true, "cgroup": len(args) == 0, "sampling": true, "comm": true, "platform": true}; !maps.Equal(got, want) {
			t.Errorf("check %v: collectors enabled %v, want %v", args, got, want)
		}
	}
	if !r.Runnable || len(r.Features) < 9 || len(r.Groups) == 0 {
		t.Errorf("report = %+v", r)
	}
	// Either a tree or the reason there is none, never both nor neither.
	if (len(r.Topdown.Trees) == 0) == (r.Topdown.Reason == "") {
		t.Errorf("topdown status = %+v", r.Topdown)
	}
	// Memory sampling: events to sample, or what is missing and why.
	if ms := r.MemorySampling; len(ms.Events) == 0 && (len(ms.Missing) == 0 || ms.Missing[0].Why == "") {
		t.Errorf("memory sampling status = %+v", ms)
	}
	pmus := map[string]bool{}
	for _, p := range r.PMUs {
		pmus[p.Name] = true
	}
	entries, _ := os.ReadDir("/sys/bus/event_source/devices")
	for _, e := range entries {
		if !pmus[e.Name()] {
			t.Errorf("PMU %s in sysfs but not in the report", e.Name())
		}
	}
	for _, f := range r.Features {
		if !f.Available && (f.Reason == "" || f.Fix == "") {
			t.Errorf("%s missing without reason or fix", f.Name)
		}
	}
	text, err := exec.Command(binary, "check").Output()
	if err != nil || !strings.Contains(string(text), "Features:") || !strings.Contains(string(text), "The exporter can run here") ||
		!strings.Contains(string(text), "Top-Down: ") || !strings.Contains(string(text), "Memory sampling: ") {
		t.Errorf("check text: %v\n%s", err, text)
	}
	// Unprivileged: the report says why and exits non-zero.
	cmd := exec.Command(binary, "check")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	text, err = cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(text), "[no]  system_wide") {
		t.Errorf("unprivileged check: %v\n%s", err, text)
	}
}

// TestCheckInUserNamespace runs check as a pod with a user namespace of
// its own runs (hostUsers: false): root mapped to root, a network
// namespace of its own. The kernel sends it no CPU uevents
// (kernel/cpuhotplug's TestListenInNamespaces shows it), and check
// says so, with the fix.
func TestCheckInUserNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command(binary, "check")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	text, err := cmd.Output()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("check in a user namespace: %v", err)
	}
	for _, want := range []string{"[no]  cpu_hotplug_uevents", "the kernel sends hardware uevents only to network namespaces of the initial user namespace", "fix: run the pod without a user namespace of its own (hostUsers: true"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("check in a user namespace lacks %q:\n%s", want, text)
		}
	}
}

func TestBadFlags(t *testing.T) {
	out, err := exec.Command(binary, "--collector.counting.interval=-1s").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--collector.counting.interval=-1s: outside the range it takes, [10ms, 1h0m0s]") {
		t.Errorf("negative interval: %v %s", err, out)
	}
	out, err = exec.Command(binary, "--collector.sampling.ring-pages=3").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--collector.sampling.ring-pages must be a power of two, got 3") {
		t.Errorf("ring pages: %v %s", err, out)
	}
	out, err = exec.Command(binary, "--no-such-flag").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown long flag '--no-such-flag'") {
		t.Errorf("unknown flag: %v %s", err, out)
	}
}

// TestCheckWarnsAboutFDLimit runs check under a low open-file limit: the default
// profile's 8 software events on every CPU plus the reserve exceed 66.
func TestCheckWarnsAboutFDLimit(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command("sh", "-c", "ulimit -n 66 && exec \"$0\" check", binary)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	// One per event per CPU online as check saw them (another process may
	// have taken one offline): the software group's 8 events, and a core
	// PMU's beside them where one exists (15 in all on QEMU's arm64).
	var cpus int
	if m := regexp.MustCompile(`Online: +CPUs (\S+)`).FindSubmatch(out); m != nil {
		online, _ := cpuset.Parse(string(m[1]))
		cpus = len(online)
	}
	if cpus == 0 {
		t.Fatalf("check names no CPU online:\n%s", out)
	}
	var need int
	if m := regexp.MustCompile(`the event groups need (\d+) file descriptors`).FindSubmatch(out); m != nil {
		need, _ = strconv.Atoi(string(m[1]))
	}
	if need < 8*cpus || need%cpus != 0 || !strings.Contains(string(out), "the open-file limit is 66") {
		t.Errorf("check output lacks the event groups' need of 8 or more file descriptors per CPU (%d CPUs) and the limit of 66:\n%s", cpus, out)
	}
}

func TestTopdownCommand(t *testing.T) {
	rec := "testdata/spr-interval-percpu.csv"
	out, err := exec.Command(binary, "topdown", "--uarch", "spr", "--format", "json", rec).Output()
	if err != nil {
		t.Fatalf("topdown: %v", err)
	}
	var r struct {
		Uarch     string
		Intervals []struct {
			Time    *float64
			CPU     string
			Metrics map[string]float64
		}
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// CPU0's vector is the hand-computed one of topdown's tests: frontend 19%.
	if r.Uarch != "spr" || len(r.Intervals) != 2 || *r.Intervals[0].Time != 1.001 || r.Intervals[0].CPU != "CPU0" ||
		r.Intervals[0].Metrics["frontend_bound"] != 0.19 || r.Intervals[1].Metrics["retiring"] != 0.5 {
		t.Errorf("json: %s", out)
	}
	if _, ok := r.Intervals[1].Metrics["memory_bound"]; ok {
		t.Error("memory_bound present although its input was not counted")
	}
	for _, iv := range r.Intervals {
		for k, v := range iv.Metrics {
			if v < 0 || v > 1 {
				t.Errorf("%s %s = %v outside [0,1]", iv.CPU, k, v)
			}
		}
	}

	// The summary sums the counts of both intervals: frontend_bound
	// (200 + 500 − 10)/(1000 + 2000) = 23%, the slot-weighted mean of 19%
	// and 25%; memory_bound's input was not counted in the second, so it
	// is left out, and its "-" says why.
	var sum struct {
		Summary []struct {
			Intervals int
			Metrics   map[string]float64
			Flagged   []string
			Counts    map[string]float64
			Partial   []string `json:"not_counted_throughout"`
		}
		Thresholds bool
	}
	json.Unmarshal(out, &sum)
	if len(sum.Summary) != 1 || sum.Summary[0].Intervals != 2 || math.Abs(sum.Summary[0].Metrics["frontend_bound"]-0.23) > 1e-12 ||
		!slices.Contains(sum.Summary[0].Flagged, "frontend_bound") || sum.Summary[0].Counts["TOPDOWN.SLOTS:perf_metrics"] != 3000 ||
		len(sum.Summary[0].Partial) != 1 || !sum.Thresholds {
		t.Errorf("json summary: %s", out)
	}

	// Table from standard input: the summary only, with threshold flags
	// and the "-" explained; --intervals adds each interval's tree.
	cmd := exec.Command(binary, "topdown", "--uarch", "spr", "-")
	cmd.Stdin = strings.NewReader(readFile(t, rec))
	out, err = cmd.Output()
	if err != nil || !strings.Contains(string(out), "frontend_bound           23.0%  <==") || !strings.Contains(string(out), "memory_bound               -") ||
		strings.Contains(string(out), "19.0%") || !strings.Contains(string(out), "PERF_METRICS.MEMORY_BOUND was not counted in every interval") {
		t.Errorf("table: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "topdown", "--uarch", "spr", "--intervals", rec).Output()
	if err != nil || !strings.Contains(string(out), "1.001 s  CPU0\n  frontend_bound           19.0%  <==") || !strings.Contains(string(out), "frontend_bound           23.0%  <==") {
		t.Errorf("table with --intervals: %v\n%s", err, out)
	}

	// The wrong tree computes nothing: a clear failure.
	out, err = exec.Command(binary, "topdown", "--uarch", "skx", rec).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "no metric of the skx tree could be computed") {
		t.Errorf("wrong uarch: %v\n%s", err, out)
	}
	// A malformed line: what came before it is still computed and printed.
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte(readFile(t, rec)+"     3.0,CPU0,garbage,,slots,1,100.00,,\n"), 0o644)
	cmd = exec.Command(binary, "topdown", "--uarch", "spr", "--format", "json", bad)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "line 23: counter value \"garbage\"") || !strings.Contains(string(out), `"frontend_bound": 0.19`) {
		t.Errorf("malformed line: %v\nstdout %s\nstderr %s", err, out, stderr.String())
	}
	// --list-events prints a perf command whose groups hold every event of the tree.
	out, err = exec.Command(binary, "topdown", "--uarch", "zen4", "--list-events").Output()
	if err != nil || !strings.HasPrefix(string(out), "perf stat -x, -I 1000 -a -e '{cpu/event=0x76,name=ls_not_halted_cyc/,") {
		t.Errorf("list-events: %v\n%s", err, out)
	}
	// Arm needs the recording host's slots.
	out, err = exec.Command(binary, "topdown", "--uarch", "neoverse-n2", rec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pass --slots N") {
		t.Errorf("arm without slots: %v\n%s", err, out)
	}
}

// TestServeTopdown runs live Top-Down through the binary with a user tree over
// software events (this VM has no PMU for the built-in trees): slots are cpu-clock
// and frontend_bound is fixed at 0.25, so the exported counters must keep that ratio.
func TestServeTopdown(t *testing.T) {
	testenv.RequireRoot(t)
	promtool := testenv.RequireTool(t, "promtool")
	p := start(t, nil, "--collector.topdown.uarch=none", "--collector.topdown.definitions=testdata/software-topdown.yaml")
	time.Sleep(400 * time.Millisecond)
	body, mfs := p.scrape(t)
	slots := mustValue(t, mfs, "pmu_slots_total", nil)
	fe := mustValue(t, mfs, "pmu_topdown_slots_total", map[string]string{"category": "frontend_bound", "level": "1", "parent": ""})
	mem := mustValue(t, mfs, "pmu_topdown_slots_total", map[string]string{"category": "memory_bound", "level": "2", "parent": "backend_bound"})
	if slots < 0.2e9 || math.Abs(fe/slots-0.25) > 1e-9 || math.Abs(mem/slots-0.375) > 1e-9 {
		t.Errorf("slots %v, frontend %v, memory %v", slots, fe, mem)
	}
	if v := mustValue(t, mfs, "pmu_topdown_info", map[string]string{"uarch": "software", "source": "events", "smt": "n/a"}); v != 1 {
		t.Errorf("pmu_topdown_info = %v", v)
	}
	if _, ok := value(t, mfs, "pmu_events_total", map[string]string{"event": "CLOCK"}); ok {
		t.Error("a Top-Down input leaked into pmu_events_total")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestRecordingRules checks the shipped rules and runs their unit tests.
func TestRecordingRules(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool")
	dir := "../../deploy/prometheus"
	for _, args := range [][]string{{"check", "rules", "pmu_exporter.rules.yml"}, {"test", "rules", "pmu_exporter.rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestServeBadTopdownDefinitions: a --collector.topdown.definitions file that does not
// parse is a configuration error like a bad --config.file: logged at ERROR
// with its name once, counted in pmu_config_errors; counting goes on.
func TestServeBadTopdownDefinitions(t *testing.T) {
	testenv.RequireRoot(t)
	def := filepath.Join(t.TempDir(), "defs.yaml")
	os.WriteFile(def, []byte("metrics:\n  - {name: a, level: 1, formula: b}\n  - {name: b, level: 1, formula: a}\n"), 0o644)
	p := start(t, nil, "--collector.topdown.uarch=none", "--collector.topdown.definitions="+def)
	_, mfs := p.scrape(t)
	if v := mustValue(t, mfs, "pmu_config_errors", nil); v != 1 {
		t.Errorf("pmu_config_errors = %v", v)
	}
	if _, ok := value(t, mfs, "pmu_events_total", sw("cpu-clock")); !ok {
		t.Error("counting stopped over a bad definitions file")
	}
	log := p.log.String()
	if !strings.Contains(log, `level=ERROR`) || !strings.Contains(log, "metrics form a cycle") || strings.Count(log, def) != 1 {
		t.Errorf("the log does not say, once and at ERROR, what is wrong with %s:\n%s", def, log)
	}
}

// jsonKeys lists every object key in v, as paths.
func jsonKeys(v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = append(out, at+"/"+k)
			out = append(out, jsonKeys(e, at+"/"+k)...)
		}
	case []any:
		for _, e := range v {
			out = append(out, jsonKeys(e, at+"[]")...)
		}
	}
	return out
}
