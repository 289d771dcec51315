// Package dashboards holds the tests of the Grafana dashboards in this
// directory: their JSON model, that every query parses as PromQL, and that
// every query returns data from a real Prometheus scraping the exporter.
package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Name, Type, Label string
	Query             any        `json:"query"`
	Datasource        *reference `json:"datasource"`
	Options           []struct {
		Value string `json:"value"`
	} `json:"options"`
}

type reference struct{ Type, UID string }

type panel struct {
	ID          int        `json:"id"`
	Type        string     `json:"type"`
	Title       string     `json:"title"`
	Description string     `json:"description"`
	Datasource  *reference `json:"datasource"`
	GridPos     struct {
		Y int `json:"y"`
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string     `json:"expr"`
		Datasource *reference `json:"datasource"`
	} `json:"targets"`
}

func load(t *testing.T) map[string]dashboard {
	t.Helper()
	files, _ := filepath.Glob("*.json")
	if len(files) == 0 {
		t.Fatal("no dashboards (*.json) here")
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = d
	}
	return out
}

// query is one PromQL expression of a dashboard, with Grafana's variables
// replaced by values a query can run with.
type query struct {
	where, expr string
}

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)

// queries expands each panel target and each variable's label_values()
// selector; $parent takes each of its values, $instance the regex
// instance, the others .* (all).
func queries(t *testing.T, d dashboard, rateInterval, instance string) []query {
	t.Helper()
	vars := map[string][]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = []string{".*"}
		if v.Name == "instance" {
			vars[v.Name] = []string{instance}
		}
		if v.Type == "custom" {
			vars[v.Name] = nil
			for _, o := range v.Options {
				vars[v.Name] = append(vars[v.Name], o.Value)
			}
		}
	}
	expand := func(where, e string) []query {
		e = strings.ReplaceAll(e, "$__rate_interval", rateInterval)
		out := []query{{where, e}}
		for name, values := range vars {
			var next []query
			for _, q := range out {
				if !strings.Contains(q.expr, "$"+name) {
					next = append(next, q)
					continue
				}
				for _, v := range values {
					next = append(next, query{q.where + " " + name + "=" + v, strings.ReplaceAll(q.expr, "$"+name, v)})
				}
			}
			out = next
		}
		return out
	}
	var out []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, expand(d.Title+" / "+p.Title, tg.Expr)...)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("%s: variable %s: %q is not label_values(selector, label)", d.Title, v.Name, text)
			continue
		}
		out = append(out, expand(d.Title+" / variable "+v.Name, m[1])...)
	}
	return out
}

// TestModel checks what Grafana and the chart's sidecar rely on: a current
// schema, a Prometheus datasource variable that every panel and target uses
// (no datasource UID written in), $__rate_interval in every rate, unique
// UIDs and panel ids.
func TestModel(t *testing.T) {
	uids := map[string]bool{}
	for f, d := range load(t) {
		if d.UID == "" || uids[d.UID] {
			t.Errorf("%s: uid %q missing or repeated", f, d.UID)
		}
		uids[d.UID] = true
		if d.SchemaVersion < 39 {
			t.Errorf("%s: schemaVersion %d", f, d.SchemaVersion)
		}
		hasDS := false
		for _, v := range d.Templating.List {
			if v.Type == "datasource" && v.Name == "datasource" && v.Query == "prometheus" {
				hasDS = true
			}
			if v.Datasource != nil && v.Datasource.UID != "${datasource}" {
				t.Errorf("%s: variable %s uses datasource %q", f, v.Name, v.Datasource.UID)
			}
		}
		if !hasDS {
			t.Errorf("%s: no Prometheus datasource variable", f)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d repeated", f, p.ID)
			}
			ids[p.ID] = true
			refs := []*reference{p.Datasource}
			for _, tg := range p.Targets {
				refs = append(refs, tg.Datasource)
				if strings.Contains(tg.Expr, "rate(") && !strings.Contains(tg.Expr, "[$__rate_interval]") && !strings.Contains(tg.Expr, ":ratio_rate1m") {
					t.Errorf("%s / %s: a rate without $__rate_interval: %s", f, p.Title, tg.Expr)
				}
			}
			for _, r := range refs {
				if r == nil || r.Type != "prometheus" || r.UID != "${datasource}" {
					t.Errorf("%s / %s: datasource %+v, want the ${datasource} variable", f, p.Title, r)
				}
			}
		}
	}
}

// nativeOnly are PromQL's functions of native histograms.
var nativeOnly = regexp.MustCompile(`\bhistogram_(sum|count|fraction|avg|stddev|stdvar)\(`)

// TestConventions holds the dashboards to the ecosystem's mixins (issue
// 57): datasource, cluster, job and instance variables first, in that
// order, instance built from pmu_info (a series every host has, PMU or
// not) and labelled for what it is; every panel with a description and a
// unit; every query of a node's series scoped by cluster, job and
// instance; one title prefix.
func TestConventions(t *testing.T) {
	scoped := `cluster=~"$cluster",job=~"$job",instance=~"$instance"`
	for f, d := range load(t) {
		if !strings.HasPrefix(d.Title, "PMU / ") {
			t.Errorf("%s: title %q does not begin \"PMU / \"", f, d.Title)
		}
		var names []string
		for _, v := range d.Templating.List {
			names = append(names, v.Name)
		}
		if len(names) < 4 || strings.Join(names[:4], ",") != "datasource,cluster,job,instance" {
			t.Errorf("%s: variables %v; want datasource, cluster, job, instance first", f, names)
		}
		for _, v := range d.Templating.List {
			q, _ := v.Query.(map[string]any)
			text, _ := q["query"].(string)
			if v.Name == "instance" && (!strings.HasPrefix(text, "label_values(pmu_info{") || v.Label != "Instance") {
				t.Errorf("%s: instance variable %q from %q; want Instance, from pmu_info", f, v.Label, text)
			}
			if v.Name == "node" {
				t.Errorf("%s: a variable named node selects a Top-Down node, not a node", f)
			}
		}
		for _, p := range d.Panels {
			if p.Type == "row" {
				continue
			}
			if p.Description == "" || p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s / %s: description %q, unit %q: want both", f, p.Title, p.Description, p.FieldConfig.Defaults.Unit)
			}
			for _, tg := range p.Targets {
				// Classic buckets only: a Prometheus without native
				// histograms has no other.
				if nativeOnly.MatchString(tg.Expr) || strings.Contains(tg.Expr, "histogram_quantile(") && !strings.Contains(tg.Expr, "_bucket{") {
					t.Errorf("%s / %s: a query of native histograms: %s", f, p.Title, tg.Expr)
				}
				// A recording rule's series aggregated over instances
				// (namespace:...) has none to scope.
				if !strings.Contains(tg.Expr, ":pmu_") && strings.Count(tg.Expr, "instance=~") != strings.Count(tg.Expr, scoped) {
					t.Errorf("%s / %s: a selector not scoped by cluster, job and instance: %s", f, p.Title, tg.Expr)
				}
			}
		}
	}
}

// sampledFamily matches the series that rest on a sampler: memory
// accesses and their data sources, shared lines, communication and reuse
// (issue 61).
var sampledFamily = regexp.MustCompile(`\bpmu_(mem|cacheline|comm|cgroup_comm|address_samples|reuse)_\w+`)

// TestSampledPanelsMarked: a dashboard with any panel on sampled series
// has, at its top (above every one of them), a stat panel of
// pmu_sampler_validated by sampler, so that nobody reads a false-sharing
// share or a data source from a sampler that failed its own check without
// being told (a failed sampler's series is 0, which the exporter's
// TestSamplerValidationSeries holds; this panel shows it red). A dashboard
// with none has no such panel.
func TestSampledPanelsMarked(t *testing.T) {
	marked := 0
	for file, d := range load(t) {
		var marker *panel
		lowest := -1
		for i, p := range d.Panels {
			for _, tg := range p.Targets {
				switch {
				case strings.Contains(tg.Expr, "pmu_sampler_validated"):
					marker = &d.Panels[i]
				case sampledFamily.MatchString(tg.Expr):
					if lowest < 0 || p.GridPos.Y < lowest {
						lowest = p.GridPos.Y
					}
				}
			}
		}
		switch {
		case lowest < 0 && marker != nil:
			t.Errorf("%s: a sampler panel and no sampled series", file)
		case lowest < 0:
		case marker == nil:
			t.Errorf("%s: panels on sampled series, and no pmu_sampler_validated panel above them", file)
		case marker.Type != "stat" || marker.GridPos.Y >= lowest || !strings.Contains(marker.Targets[0].Expr, "by (instance, sampler)"):
			t.Errorf("%s: the sampler panel %q (%s at y %d) is not a stat by instance and sampler above the sampled panels (y %d)", file, marker.Title, marker.Type, marker.GridPos.Y, lowest)
		default:
			marked++
		}
	}
	if marked < 2 {
		t.Errorf("%d dashboards marked, want the data-locality and memory-access ones at least", marked)
	}
}

func TestQueriesParse(t *testing.T) {
	for _, d := range load(t) {
		for _, q := range queries(t, d, "1m", ".*") {
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr); err != nil {
				t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			}
		}
	}
}

// TestQueriesReturnData starts the exporter eight times — five replays
// (the synthetic skx node: pods, Top-Down, PEBS samples; the Arm SPE
// example: its AUX event's losses; a two-socket node's platform PMUs;
// this project's VM: timer samples with registers, its validation, an
// access trace's reuse; the trace under the watchpoint governor), live on this host (capabilities, cgroup
// switches, communication), live with ReuseTracker on a cgroup's
// watchpoints, and the same with distances counted in events (stack
// distances, miss ratios) — and Debian's Prometheus scraping them every
// second with the shipped rules loaded. Every query of every dashboard
// must return a series; and from the replays alone (the exporter's own
// eBPF families from the VM's recorded scrapes, --replay.self).
func TestQueriesReturnData(t *testing.T) {
	prom := testenv.RequireTool(t, "prometheus")
	testenv.RequireRoot(t)
	// Reuse distances and the trap panels come from watchpoints: on a
	// guest the debug registers do not reach, those queries have no data.
	traps := testenv.HasFeature(t, hostgate.Watchpoints)
	// The cgroup programs' run time is exported only while the kernel's
	// bpf_stats are on, an operator's node-wide choice: on for this test,
	// then as they were.
	testenv.EnableBPFStats(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "pmu_exporter")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/pmu_exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	replayAddr, liveAddr, promAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	// Replays, whose instances are named replay-*: the skx node
	// (pods, Top-Down to level 3, PEBS memory samples); the Arm SPE example (its
	// AUX event's losses); the platform PMUs of a two-socket node; and
	// this project's VM (software events, timer samples with registers
	// in a cgroup, its validation, with an access trace beside).
	testenv.Start(t, filepath.Join(dir, "replay.log"), bin, "--web.listen-address="+replayAddr,
		"--source=replay", "--replay.file=../examples/replay/skx-synthetic.csv", "--replay.uarch=skx",
		"--replay.samples=../examples/replay/skx-c2c.data", "--collector.topdown.level=3", "--collector.topdown.cgroup-level=3")
	speAddr, platformAddr, vmAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	testenv.Start(t, filepath.Join(dir, "spe.log"), bin, "--web.listen-address="+speAddr,
		"--source=replay", "--replay.file=../examples/replay/skx-synthetic.csv", "--replay.uarch=skx",
		"--replay.samples=../examples/replay/n1-spe.data")
	testenv.Start(t, filepath.Join(dir, "platform.log"), bin, "--web.listen-address="+platformAddr,
		"--source=replay", "--replay.file=../examples/replay/skx-platform.csv", "--collector.platform.memory-peak=127968000000")
	// An Arm server's CMN mesh: its requests to the memory controllers.
	armAddr := testenv.FreeAddr(t)
	testenv.Start(t, filepath.Join(dir, "arm.log"), bin, "--web.listen-address="+armAddr,
		"--source=replay", "--replay.file=../examples/replay/arm-platform.csv")
	testenv.Start(t, filepath.Join(dir, "vm.log"), bin, "--web.listen-address="+vmAddr,
		"--source=replay", "--replay.file=../examples/replay/vm-software-events.csv",
		"--replay.samples=../examples/replay/falseshare.data", "--replay.symfs=../examples/replay/symfs",
		"--replay.validation=../examples/replay/vm-validation.json", "--replay.self=../examples/replay/vm-self.prom",
		"--replay.trace=../examples/replay/reuse-trace.txt", "--replay.trace-period=100")
	// The same trace under the watchpoint governor, at the cost a trap
	// took on this project's VM: the governor's panels.
	governedAddr := testenv.FreeAddr(t)
	testenv.Start(t, filepath.Join(dir, "governed.log"), bin, "--web.listen-address="+governedAddr,
		"--source=replay", "--replay.file=../examples/replay/vm-software-events.csv",
		"--replay.trace=../examples/replay/reuse-trace.txt", "--replay.trace-period=100", "--replay.trap-cost=25us")
	testenv.Start(t, filepath.Join(dir, "live.log"), bin, "--web.listen-address="+liveAddr, "--collector.counting.interval=500ms",
		"--collector.sampling.event=page-faults", "--collector.sampling.period=100", "--collector.comm.period=200000", "--validate.on-start",
		"--collector.platform.memory-peak=1e11")
	// Threads that share lines, for the data locality dashboard: the
	// False-Sharing benchmark, half its adds on its own slots.
	bench := filepath.Join(dir, "sharebench")
	if out, err := exec.Command("go", "build", "-o", bench, "../internal/groundtruth/sharebench").CombinedOutput(); err != nil {
		t.Fatalf("go build sharebench: %v\n%s", err, out)
	}
	testenv.Start(t, filepath.Join(dir, "sharebench.log"), bench, "-f", "0.5", "-duration", "90s")
	// A third exporter runs ReuseTracker on the watchpoints of a cgroup
	// where a thread walks an array, for the reuse row.
	reusebench := filepath.Join(dir, "reusebench")
	if out, err := exec.Command("go", "build", "-o", reusebench, "../internal/groundtruth/reusebench").CombinedOutput(); err != nil {
		t.Fatalf("go build reusebench: %v\n%s", err, out)
	}
	top, dirs := testenv.Cgroups(t, "reuse", "stack")
	reuseAddr, stackAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	testenv.Start(t, filepath.Join(dir, "reuse.log"), bin, "--web.listen-address="+reuseAddr,
		"--collector.comm.cgroup="+top+"/reuse", "--collector.comm.reuse")
	testenv.StartIn(t, dirs[0], filepath.Join(dir, "reusebench.log"), reusebench, "-slots", "4194304", "-duration", "90s")
	// A fourth counts the distances in events, for the stack distances and
	// miss ratios: no PMU counts loads and stores here, so context switches
	// stand in for them (reusebench naps 16 times a walk).
	testenv.Start(t, filepath.Join(dir, "stack.log"), bin, "--web.listen-address="+stackAddr,
		"--collector.comm.cgroup="+top+"/stack", "--collector.comm.reuse", "--collector.comm.reuse-clock=accesses=context-switches")
	testenv.StartIn(t, dirs[1], filepath.Join(dir, "stackbench.log"), reusebench, "-slots", "1048576", "-naps", "16", "-duration", "90s")
	rules, err := filepath.Abs("../deploy/prometheus/pmu_exporter.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: pmu
    static_configs:
      - targets: [%q]
        labels: {instance: replay-skx}
      - targets: [%q]
        labels: {instance: replay-spe}
      - targets: [%q]
        labels: {instance: replay-platform}
      - targets: [%q]
        labels: {instance: replay-arm}
      - targets: [%q]
        labels: {instance: replay-vm}
      - targets: [%q]
        labels: {instance: replay-governed}
      - targets: [%q]
        labels: {instance: live-node}
      - targets: [%q]
        labels: {instance: reuse-node}
      - targets: [%q]
        labels: {instance: stack-node}
`, rules, replayAddr, speAddr, platformAddr, armAddr, vmAddr, governedAddr, liveAddr, reuseAddr, stackAddr)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfgFile, []byte(cfg), 0o644)
	// Without native histograms (issue 57): every panel reads classic
	// buckets, as a Prometheus that does not ingest native ones has.
	testenv.Start(t, filepath.Join(dir, "prometheus.log"), prom, "--config.file="+cfgFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)

	var all []query
	for _, d := range load(t) {
		all = append(all, queries(t, d, "10s", ".*")...)
		// From the replays alone, too: what a host without a PMU or
		// watchpoints shows (issue 46).
		for _, q := range queries(t, d, "10s", "replay-.*") {
			q.where += " (replays alone)"
			all = append(all, q)
		}
	}
	pending := map[string]query{}
	for _, q := range all {
		pending[q.where+"\x00"+q.expr] = q
	}
	// The node row's panels need platform PMUs that VMs rarely have
	// (the platform replay has them): a panel whose feature the live
	// exporter reports missing has no data from it by the host's proof
	// (pmu_capability 0, check says why); present, it must have data.
	platformHas := capabilities(t, liveAddr)
	for k, q := range pending {
		if f := platformFeature(q.expr); f != "" && !platformHas[f] && !strings.HasSuffix(q.where, "(replays alone)") {
			t.Logf("%s: no data, as expected where pmu_capability{feature=%q} is 0 (pmu_exporter check says why)\n%s", q.where, f, q.expr)
			delete(pending, k)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		for k, q := range pending {
			n, err := series(promAddr, q.expr)
			if err != nil {
				t.Fatalf("%s: %v\n%s", q.where, err, q.expr)
			}
			if n > 0 {
				delete(pending, k)
			}
		}
	}
	for k, q := range pending {
		if !traps && watchpointQuery.MatchString(q.expr) {
			t.Logf("%s: no data, as expected where watchpoints do not fire (internal/hostgate)\n%s", q.where, q.expr)
			delete(pending, k)
			continue
		}
		t.Errorf("%s: no data after 60 s\n%s", q.where, q.expr)
	}
	if t.Failed() {
		for _, l := range []string{"replay.log", "spe.log", "platform.log", "arm.log", "vm.log", "live.log", "reuse.log", "stack.log", "prometheus.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, l))
			t.Logf("%s:\n%s", l, tail(string(b), 2000))
		}
		// What each exporter says now of the metrics the queries without
		// data read, and of its sampling: why they had none.
		names := map[string]bool{}
		for _, q := range pending {
			for _, n := range metricName.FindAllString(q.expr, -1) {
				names[n] = true
			}
		}
		for name, addr := range map[string]string{"live": liveAddr, "reuse": reuseAddr, "stack": stackAddr, "replay-vm": vmAddr} {
			t.Logf("%s exporter's /metrics, of those and of its sampling:\n%s", name, exposed(addr, names))
		}
		online, _ := os.ReadFile("/sys/devices/system/cpu/online")
		t.Logf("online CPUs now: %s", online)
	}
}

var metricName = regexp.MustCompile(`pmu_[a-z0-9_]+`)

// platformFeature is the capability a node-row query needs: energy for the
// power PMU's counters, cstates for residency, frequency for aperf and
// mperf, memory_bandwidth, memory_requests, numa_traffic and upi_traffic
// for the uncore's;
// "" for the others.
func platformFeature(expr string) string {
	switch {
	case strings.Contains(expr, "pmu_node_energy"):
		return "energy"
	case strings.Contains(expr, "pmu_node_memory_controller"):
		return "memory_requests"
	case strings.Contains(expr, "pmu_node_memory"):
		return "memory_bandwidth"
	case strings.Contains(expr, "pmu_node_llc_miss") || strings.Contains(expr, "pmu_node_dram"):
		return "numa_traffic"
	case strings.Contains(expr, "pmu_node_upi") || strings.Contains(expr, "pmu_node_xgmi"):
		return "upi_traffic"
	case strings.Contains(expr, "cstate_residency"):
		return "cstates"
	case strings.Contains(expr, `msr="aperf"`) || strings.Contains(expr, `msr="mperf"`):
		return "frequency"
	}
	return ""
}

// capabilities are an exporter's pmu_capability features that are 1, once
// it serves them (within 30 s of its start).
func capabilities(t *testing.T, addr string) map[string]bool {
	t.Helper()
	var b []byte
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte("pmu_capability{")) {
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s served no pmu_capability in 30 s: %v", addr, err)
		}
	}
	has := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^pmu_capability\{feature="([a-z_]+)"\} 1$`).FindAllStringSubmatch(string(b), -1) {
		has[m[1]] = true
	}
	return has
}

// watchpointQuery matches the queries whose data only live traps make:
// the watchpoint budget's, and ReuseTracker's in seconds and at this
// host's caches. The replayed access trace (--replay.trace) gives the rest
// of ReuseTracker's panels data on every host.
var watchpointQuery = regexp.MustCompile(`pmu_(reuse_time|reuse_observed_time|reuse_miss_ratio|comm_watch)[a-z0-9_]*`)

// exposed is the lines of an exporter's /metrics whose metric is in names
// or is about its sampling and communication (pmu_sampling_*, pmu_comm_*).
func exposed(addr string, names map[string]bool) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		n := metricName.FindString(l)
		if strings.HasPrefix(l, "#") || n == "" {
			continue
		}
		if names[n] || strings.HasPrefix(n, "pmu_sampling_") || strings.HasPrefix(n, "pmu_comm_") {
			out = append(out, l)
		}
	}
	return tail(strings.Join(out, "\n"), 6000)
}

// series runs an instant query and counts the series it returns.
func series(addr, expr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, nil // not up yet
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status, Error string
		Data          struct {
			Result []json.RawMessage
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("answer %q: %w", body, err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query failed: %s", r.Error)
	}
	return len(r.Data.Result), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
