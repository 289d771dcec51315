package main

import (
	"encoding/json"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

const handmade = "../../replay/testdata/skx-handmade.csv"

// TestServeReplay plays the hand-written skx recording through serve. Whatever
// the number of intervals played when scraped, skx's formulas tie the
// families together: slots are 4 × CPU_CLK_UNHALTED.THREAD (SMT off),
// frontend-bound slots are IDQ_UOPS_NOT_DELIVERED.CORE and retiring slots are
// UOPS_RETIRED.RETIRE_SLOTS, on the node and in the container.
func TestServeReplay(t *testing.T) {
	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.uarch=skx")
	body, mfs := p.scrape(t)
	if v := mustValue(t, mfs, "pmu_info", map[string]string{"source": "replay", "pmu_name": "skx"}); v != 1 {
		t.Errorf("pmu_info %v", v)
	}
	ev := func(name string) float64 {
		return mustValue(t, mfs, "pmu_events_total", map[string]string{"event": name})
	}
	node := func(cat string) float64 {
		return mustValue(t, mfs, "pmu_topdown_slots_total", map[string]string{"category": cat})
	}
	slots := mustValue(t, mfs, "pmu_slots_total", nil)
	if clk := ev("CPU_CLK_UNHALTED.THREAD"); clk == 0 || slots != 4*clk {
		t.Errorf("slots %v, CPU_CLK_UNHALTED.THREAD %v", slots, clk)
	}
	if fe, idq := node("frontend_bound"), ev("IDQ_UOPS_NOT_DELIVERED.CORE"); math.Abs(fe-idq) > 1e-6 {
		t.Errorf("frontend-bound slots %v, IDQ_UOPS_NOT_DELIVERED.CORE %v", fe, idq)
	}
	if ret, rs := node("retiring"), ev("UOPS_RETIRED.RETIRE_SLOTS"); math.Abs(ret-rs) > 1e-6 {
		t.Errorf("retiring slots %v, UOPS_RETIRED.RETIRE_SLOTS %v", ret, rs)
	}
	pod := map[string]string{"namespace": "shop", "pod": "checkout-7d9f", "container": "web"}
	cgRet := mustValue(t, mfs, "pmu_cgroup_topdown_slots_total", map[string]string{"pod": "checkout-7d9f", "category": "retiring"})
	if rs := mustValue(t, mfs, "pmu_cgroup_events_total", map[string]string{"pod": "checkout-7d9f", "event": "UOPS_RETIRED.RETIRE_SLOTS"}); cgRet != rs || rs == 0 {
		t.Errorf("container retiring slots %v, its UOPS_RETIRED.RETIRE_SLOTS %v", cgRet, rs)
	}
	mustValue(t, mfs, "pmu_cgroup_slots_total", pod)
	if v := mustValue(t, mfs, "pmu_topdown_info", map[string]string{"uarch": "skx", "source": "replay", "smt": "off"}); v != 1 {
		t.Errorf("pmu_topdown_info %v", v)
	}
	// The capabilities are the recording host's, as far as the recording
	// shows them: skx's events were counted (hardware counters), not
	// through PERF_METRICS (skx has none: UOPS_RETIRED.RETIRE_SLOTS is
	// not a slots event), with perf stat -G; of what it cannot show
	// (watchpoints) it says nothing, rather than this host's.
	for feature, want := range map[string]float64{"hardware_counters": 1, "perf_metrics": 0, "cgroup_events": 1} {
		if v := mustValue(t, mfs, "pmu_capability", map[string]string{"feature": feature}); v != want {
			t.Errorf("pmu_capability{feature=%q} %v, want %v (the recording's)", feature, v, want)
		}
	}
	if _, ok := value(t, mfs, "pmu_capability", map[string]string{"feature": "breakpoints"}); ok {
		t.Error("a replay reports watchpoints, which no perf stat recording shows")
	}
	cmd := exec.Command(testenv.RequireTool(t, "promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestServeReplayBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--source=replay"}, "--source=replay needs --replay.file"},
		{[]string{"--source=replay", "--replay.file=/nonexistent.csv"}, "--replay.file: open /nonexistent.csv"},
		{[]string{"--source=replay", "--replay.file=" + handmade, "--replay.uarch=k6"}, "--replay.uarch:"},
		{[]string{"--source=replay", "--replay.file=../../formats/perfstat/testdata/total.csv"}, "line 1: no interval time: record with perf stat -I"},
		{[]string{"--source=replay", "--replay.file=../../formats/perfstat/testdata/interval.csv", "--collector.counting.per-cpu"}, "recorded without perf stat -A"},
		{[]string{"--source=replay", "--replay.file=" + handmade, "--replay.samples=" + handmade}, "--replay.samples: not a perf.data file"},
		{[]string{"--source=replay", "--replay.file=" + handmade, "--replay.samples=-"}, "--replay.samples: - (standard input) is not a file here"},
	} {
		out, err := exec.Command(binary, append(c.args, "--web.listen-address=127.0.0.1:0")...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v, want exit 1 and %q:\n%s", c.args, err, c.want, out)
		}
	}
}

// TestServeOTLP: serve --otlp.endpoint pushes the scrape's families to an
// OTLP/HTTP receiver, under the node's resource attributes.
func TestServeOTLP(t *testing.T) {
	got := make(chan *colmetricpb.ExportMetricsServiceRequest, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req colmetricpb.ExportMetricsServiceRequest
		if r.URL.Path != "/v1/metrics" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		got <- &req
	}))
	defer srv.Close()
	start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.uarch=skx",
		"--otlp.endpoint="+srv.URL, "--otlp.interval=200ms", "--kubernetes.node-name=node-7")
	// Pushes before the first interval was played hold no pmu_events yet.
	want := []string{"pmu_info", "pmu_events", "pmu_topdown_slots", "pmu_cgroup_topdown_slots", "pmu_build_info"}
	deadline := time.After(10 * time.Second)
	for {
		var req *colmetricpb.ExportMetricsServiceRequest
		select {
		case req = <-got:
		case <-deadline:
			t.Fatalf("no OTLP push with %v in 10 s", want)
		}
		rm := req.ResourceMetrics[0]
		res := map[string]string{}
		for _, kv := range rm.Resource.Attributes {
			res[kv.Key] = kv.Value.GetStringValue()
		}
		host, _ := os.Hostname()
		if res["k8s.node.name"] != "node-7" || res["host.name"] != host || res["service.name"] != "pmu_exporter" {
			t.Fatalf("resource %v", res)
		}
		names := map[string]bool{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				names[m.Name] = true
			}
		}
		all := true
		for _, n := range want {
			all = all && names[n]
		}
		if all {
			return
		}
	}
}

// TestServeReplayTrace: --replay.trace serves ReuseTracker's outcomes of
// an access trace, the same as `pmu_exporter reuse --trace` prints of it
// at the same period (the harness's reference): the samples, drops,
// reuses, invalidations and watches by outcome as counters, the
// invalidated share and each estimated bin as gauges, in accesses, under
// the cgroup "replay:" and the file's name; with LRU stack distances.
func TestServeReplayTrace(t *testing.T) {
	const trace = "../../examples/replay/reuse-trace.txt"
	var stdout, stderr strings.Builder
	if code := run([]string{"reuse", "--trace", trace, "--period", "100", "--format", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("reuse exited %d: %s", code, stderr.String())
	}
	var want reuseJSON
	if err := json.Unmarshal([]byte(stdout.String()), &want); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.trace="+trace, "--replay.trace-period=100")
	_, mfs := p.scrape(t)
	// The raw counts carry no clock (each watch once); the estimates do.
	lbl := map[string]string{"cgroup": "replay:reuse-trace.txt", "mode": "private"}
	with := func(k, v string) map[string]string {
		l := maps.Clone(lbl)
		l[k] = v
		return l
	}
	for name, v := range map[string]uint64{"pmu_reuse_samples_total": want.Samples, "pmu_reuse_samples_dropped_total": want.Dropped,
		"pmu_reuse_invalidations_total": want.Invalidations} {
		if got := mustValue(t, mfs, name, lbl); got != float64(v) {
			t.Errorf("%s %v, reuse --trace says %d", name, got, v)
		}
	}
	// Every simulated trap is an outcome: a reuse, an invalidation or stale.
	if want.Traps != want.Reuses+want.Invalidations+want.Stale || want.Traps == 0 || want.Arms == 0 {
		t.Errorf("reuse --trace: %d traps, %d arms; %d reuses, %d invalidations, %d stale", want.Traps, want.Arms, want.Reuses, want.Invalidations, want.Stale)
	}
	if got := mustValue(t, mfs, "pmu_comm_watchpoint_traps_total", map[string]string{"outcome": "reuse"}); got != float64(want.Traps) {
		t.Errorf("pmu_comm_watchpoint_traps_total{outcome=reuse} %v, reuse --trace says %d", got, want.Traps)
	}
	if got := mustValue(t, mfs, "pmu_comm_watchpoint_arms_total", nil); got != float64(want.Arms) {
		t.Errorf("pmu_comm_watchpoint_arms_total %v, reuse --trace says %d", got, want.Arms)
	}
	// The trace's threads: two that sample and two that only store.
	if got := mustValue(t, mfs, "pmu_comm_watched_threads", map[string]string{"use": "reuse"}); got != 4 {
		t.Errorf("pmu_comm_watched_threads{use=reuse} %v, the trace has 4 threads", got)
	}
	for _, outcome := range []string{"reused", "invalidated", "censored"} {
		if got := mustValue(t, mfs, "pmu_reuse_watches_total", with("outcome", outcome)); got != float64(want.Watches[outcome]) {
			t.Errorf("watches %s %v, reuse --trace says %d", outcome, got, want.Watches[outcome])
		}
	}
	if got := mustValue(t, mfs, "pmu_reuse_outcome_share", map[string]string{"cgroup": lbl["cgroup"], "clock": "accesses", "outcome": "invalidated", "bound": "estimate"}); math.Abs(got-want.Invalidated.Share) > 1e-4 {
		t.Errorf("invalidated share %v, reuse --trace says %v", got, want.Invalidated.Share)
	}
	if len(want.Distances) == 0 {
		t.Fatal("reuse --trace estimated no distance")
	}
	for _, d := range want.Distances {
		l := with("bound", "estimate")
		l["clock"] = "accesses"
		l["bucket"] = strconv.FormatUint(d.To, 10)
		if got := mustValue(t, mfs, "pmu_reuse_event_distance_share", l); math.Abs(got-d.Share) > 1e-4 {
			t.Errorf("bin [%d, %d): %v, reuse --trace says %v", d.From, d.To, got, d.Share)
		}
		// The trace's threads spend 2 ns an access: in time, the same
		// reuses one bin up (within 0.5%: TestTimedTraceIsTheAccessTraceTwice).
		l = map[string]string{"cgroup": lbl["cgroup"], "mode": "private", "clock": "thread_cpu", "bound": "estimate",
			"bucket": strconv.FormatFloat(math.Ldexp(float64(2*d.To), -30), 'g', -1, 64)}
		if got := mustValue(t, mfs, "pmu_reuse_time_distance_share", l); math.Abs(got-d.Share) > 0.005*d.Share {
			t.Errorf("bin [%d, %d) ns: %v, reuse --trace says %v in [%d, %d) accesses", 2*d.From, 2*d.To, got, d.Share, d.From, d.To)
		}
	}
	var stack uint64
	for _, m := range mfs["pmu_reuse_stack_distance_lines"].GetMetric() {
		if labelsMatch(m, lbl) {
			stack = m.GetHistogram().GetSampleCount()
		}
	}
	if stack == 0 {
		t.Error("no LRU stack distances from a trace counted in accesses")
	}
}

// TestServeReplayTraceWatchBudget: with --replay.trap-cost the trace's
// watchpoints run under the governor, as live: its families carry the
// budget and the cost, every trap is charged at that cost, the traps stay
// within the budget of the CPU time the trace's threads ran (its fifth
// field, summed here from the file) but for the allowance and one
// sample's traps, and every sample the ungoverned harness takes is either
// the tracker's or denied.
func TestServeReplayTraceWatchBudget(t *testing.T) {
	const trace = "../../examples/replay/reuse-trace.txt"
	const cost, budget = 20e-6, 0.01
	var stdout, stderr strings.Builder
	if code := run([]string{"reuse", "--trace", trace, "--period", "100", "--format", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("reuse exited %d: %s", code, stderr.String())
	}
	var free reuseJSON
	if err := json.Unmarshal([]byte(stdout.String()), &free); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]float64{} // each thread's CPU time at its last access
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 5 && !strings.HasPrefix(l, "#") {
			ns, _ := strconv.ParseFloat(f[4], 64)
			last[f[0]] = ns / 1e9
		}
	}
	var traceCPU float64
	for _, s := range last {
		traceCPU += s
	}
	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.trace="+trace, "--replay.trace-period=100", "--replay.trap-cost=20us")
	_, mfs := p.scrape(t)
	if got := mustValue(t, mfs, "pmu_comm_watchpoint_budget_ratio", nil); got != budget {
		t.Errorf("budget %v, want --collector.comm.watch-budget's default %v", got, budget)
	}
	if got := mustValue(t, mfs, "pmu_comm_watchpoint_trap_cost_seconds", nil); math.Abs(got-cost) > 1e-12 {
		t.Errorf("trap cost %v, want --replay.trap-cost's %v", got, cost)
	}
	cpu := mustValue(t, mfs, "pmu_comm_watchpoint_target_cpu_seconds_total", nil)
	spent := mustValue(t, mfs, "pmu_comm_watchpoint_trap_cpu_seconds_total", nil)
	traps := mustValue(t, mfs, "pmu_comm_watchpoint_traps_total", map[string]string{"outcome": "reuse"})
	denied := mustValue(t, mfs, "pmu_comm_watchpoint_arms_denied_total", nil)
	samples := mustValue(t, mfs, "pmu_reuse_samples_total", map[string]string{"cgroup": "replay:reuse-trace.txt"})
	t.Logf("trace CPU %.6f s, governed %.6f s; %v traps cost %.6f s; %v samples, %v denied; ungoverned %d traps, %d samples", traceCPU, cpu, traps, spent, samples, denied, free.Traps, free.Samples)
	if cpu <= 0 || cpu > traceCPU {
		t.Errorf("the governor saw %v s of CPU time, the trace's threads ran %v s", cpu, traceCPU)
	}
	if math.Abs(spent-traps*cost) > 1e-9 || spent > budget*cpu+(16+2)*cost {
		t.Errorf("%v traps cost %v s, want %v s each and within the budget %v s plus the allowance", traps, spent, cost, budget*cpu)
	}
	if denied == 0 || samples+denied != float64(free.Samples) || traps >= float64(free.Traps) {
		t.Errorf("%v samples the tracker's, %v denied, %v traps; ungoverned: %d samples, %d traps", samples, denied, traps, free.Samples, free.Traps)
	}
}

// TestServeReplaySelf: --replay.self serves the recording host's own eBPF
// families, which a replay does not run: a counter from its first
// scrape's value, rising at its rate between the file's two scrapes
// (computed here from the file), a gauge as last scraped.
func TestServeReplaySelf(t *testing.T) {
	const self = "../../examples/replay/vm-self.prom"
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	var at []float64
	runs := map[int]float64{} // sched_switch's runs by scrape
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "# scraped at "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			at = append(at, f)
		}
		if v, ok := strings.CutPrefix(l, `pmu_self_bpf_runs_total{program="sched_switch"} `); ok {
			runs[len(at)-1], _ = strconv.ParseFloat(v, 64)
		}
	}
	if len(at) != 2 {
		t.Fatalf("%s: %d scrapes", self, len(at))
	}
	rate := (runs[1] - runs[0]) / (at[1] - at[0])
	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.self="+self)
	lbl := map[string]string{"program": "sched_switch"}
	_, mfs := p.scrape(t)
	t0 := time.Now()
	first := mustValue(t, mfs, "pmu_self_bpf_runs_total", lbl)
	time.Sleep(2 * time.Second)
	_, mfs = p.scrape(t)
	second := mustValue(t, mfs, "pmu_self_bpf_runs_total", lbl)
	got := (second - first) / time.Since(t0).Seconds()
	t.Logf("sched_switch: %v then %v runs, %.1f/s; the recording's %.1f/s", first, second, got, rate)
	if first < runs[0] || rate <= 0 || math.Abs(got-rate) > 0.1*rate {
		t.Errorf("sched_switch runs %v then %v (%.1f/s), want from %v up at the recording's %.1f/s", first, second, got, runs[0], rate)
	}
	if v := mustValue(t, mfs, "pmu_self_bpf_stats_enabled", nil); v != 1 {
		t.Errorf("pmu_self_bpf_stats_enabled %v, the recording's last scrape says 1", v)
	}
	mustValue(t, mfs, "pmu_cgroup_switches_missed_total", nil)
}

// TestServeReplayCommDomains: a recording's HEADER_CACHE (perf prints the
// example's as "L3 Unified 22528K [0-1]" and "[2-3]") places its CPUs in
// last-level cache domains, named by their shared CPU lists as live, and
// replay serves the communication between them. Every detection in the
// example is between two CPUs (a thread a CPU), so each kind's domain
// volumes add up to its whole volume, and the halves do talk.
func TestServeReplayCommDomains(t *testing.T) {
	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.samples=../../examples/replay/skx-c2c.data")
	_, mfs := p.scrape(t)
	for _, kind := range []string{"true_sharing", "false_sharing"} {
		total := mustValue(t, mfs, "pmu_comm_volume_total", map[string]string{"kind": kind})
		var sum float64
		pairs := map[string]float64{}
		for _, m := range mfs["pmu_comm_domain_volume_total"].GetMetric() {
			if !labelsMatch(m, map[string]string{"kind": kind}) {
				continue
			}
			a, b := labelValue(m, "domain_a"), labelValue(m, "domain_b")
			pairs[a+"/"+b] = m.GetCounter().GetValue()
			sum += m.GetCounter().GetValue()
		}
		if total == 0 || sum != total || pairs["0-1/2-3"] == 0 || len(pairs) != 3 {
			t.Errorf("%s: domain volumes %v (sum %v), the whole volume %v: want the three pairs of 0-1 and 2-3 adding up to it", kind, pairs, sum, total)
		}
	}
}

// The timer recording of examples/replay (falseshare.c's two threads in
// the cgroup /pmu-example, perf record --all-cgroups with user registers)
// served with its code under --replay.symfs fills the address sampler's
// families as live, held to perf: every sample perf script prints is
// counted by outcome, the sampler's period is the one perf evlist shows,
// and all the communication is the cgroup's, as perf report --sort
// cgroup puts every sample there. The detections are those `comm` finds
// offline in the same file.
func TestServeReplayTimerSamples(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	const file, symfs = "../../examples/replay/falseshare.data", "../../examples/replay/symfs"
	out, err := exec.Command(perf, "script", "-i", file, "-F", "tid").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	samples := strings.Count(string(out), "\n")
	out, err = exec.Command(perf, "evlist", "-v", "-i", file).Output()
	if err != nil {
		t.Fatalf("perf evlist: %v", err)
	}
	m := regexp.MustCompile(`sample_period(?:, sample_freq \})?: (\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("perf evlist shows no sample_period: %s", out)
	}
	period, _ := strconv.ParseFloat(m[1], 64)
	out, err = exec.Command(perf, "report", "-i", file, "--sort", "cgroup", "--stdio").Output()
	if err != nil || !regexp.MustCompile(`(?m)^\s+100\.00%\s+/pmu-example$`).Match(out) {
		t.Fatalf("perf report --sort cgroup does not put every sample in /pmu-example: %v\n%s", err, out)
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"comm", "--symfs", symfs, "--format", "json", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("comm exited %d: %s", code, stderr.String())
	}
	var offline struct {
		Processes []struct {
			Detections map[string]float64 `json:"detections"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &offline); err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, pr := range offline.Processes {
		for k, v := range pr.Detections {
			found[k] += v
		}
	}

	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.samples="+file, "--replay.symfs="+symfs)
	_, mfs := p.scrape(t)
	var counted float64
	for _, s := range mfs["pmu_address_samples_total"].GetMetric() {
		counted += s.GetCounter().GetValue()
	}
	if counted != float64(samples) {
		t.Errorf("pmu_address_samples_total sums to %v, perf script prints %d samples", counted, samples)
	}
	if resolved := mustValue(t, mfs, "pmu_address_samples_total", map[string]string{"outcome": "at_ip"}); resolved == 0 {
		t.Error("no sample resolved at its IP: the code under --replay.symfs was not read")
	}
	if got := mustValue(t, mfs, "pmu_comm_sample_period_seconds", nil); got != period/1e9 {
		t.Errorf("pmu_comm_sample_period_seconds %v, perf evlist says %v ns", got, period)
	}
	for _, kind := range []string{"true_sharing", "false_sharing"} {
		all := mustValue(t, mfs, "pmu_comm_volume_total", map[string]string{"kind": kind, "source": "decode"})
		cg := mustValue(t, mfs, "pmu_cgroup_comm_volume_total", map[string]string{"kind": kind, "cgroup": "/pmu-example"})
		if cg != all {
			t.Errorf("%s: /pmu-example's volume %v, the node's %v: every sample is the cgroup's", kind, cg, all)
		}
		// One unit per family (issue 57): the timer samples' volume, its
		// nanoseconds, is in seconds, node and cgroup alike.
		sec := mustValue(t, mfs, "pmu_comm_sampled_seconds_total", map[string]string{"kind": kind})
		cgSec := mustValue(t, mfs, "pmu_cgroup_comm_sampled_seconds_total", map[string]string{"kind": kind, "cgroup": "/pmu-example"})
		if sec != all/1e9 || cgSec != sec {
			t.Errorf("%s: %v sampled seconds (cgroup %v) for a volume of %v ns", kind, sec, cgSec, all)
		}
		if _, ok := value(t, mfs, "pmu_comm_accesses_estimated_total", map[string]string{"kind": kind}); ok {
			t.Errorf("%s: timer samples' volume exported as accesses", kind)
		}
	}
	for kind, n := range found {
		if got := mustValue(t, mfs, "pmu_comm_detections_total", map[string]string{"kind": kind, "source": "decode"}); got != n {
			t.Errorf("%s detections %v, comm finds %v in the same file", kind, got, n)
		}
	}
	if found["false_sharing"] == 0 {
		t.Error("no false sharing detected between falseshare's two threads")
	}
}

// Replaying a trace beside a perf.data file, the miss ratios are at the
// caches of the file's host, as its HEADER_CACHE sizes them: the synthetic
// c2c recording's, where perf report --header-only -I lists only L3.
func TestServeReplayTraceMissRatios(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	const c2c = "../../examples/replay/skx-c2c.data"
	out, err := exec.Command(perf, "report", "-i", c2c, "--header-only", "-I").Output()
	if err != nil {
		t.Fatalf("perf report --header-only: %v", err)
	}
	levels := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#\s+L(\d) (Data|Unified)\s+\d+K`).FindAllStringSubmatch(string(out), -1) {
		levels[m[1]] = true
	}
	if !levels["3"] || levels["1"] || levels["2"] {
		t.Fatalf("perf reads caches at levels %v in %s, the test expects L3 alone:\n%s", levels, c2c, out)
	}
	p := start(t, nil, "--source=replay", "--replay.file="+handmade, "--replay.samples="+c2c,
		"--replay.trace=../../examples/replay/reuse-trace.txt", "--replay.trace-period=100")
	_, mfs := p.scrape(t)
	caches := map[string]float64{}
	for _, m := range mfs["pmu_reuse_miss_ratio"].GetMetric() {
		if c := labelValue(m, "cache"); c != "" {
			caches[c] = m.GetGauge().GetValue()
		}
	}
	if len(caches) != 1 || caches["LLC"] < 0 || caches["LLC"] > 1 {
		t.Errorf("miss ratios %v, want the LLC's alone, a share", caches)
	}
}
