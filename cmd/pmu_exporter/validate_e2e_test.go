package main

import (
	"encoding/json"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

type validationRow struct {
	Event         string  `json:"event"`
	Loop          string  `json:"kernel"`
	ExpectedSlope float64 `json:"expected_slope"`
	Slope         float64 `json:"slope"`
	R2            float64 `json:"r2"`
	Goodness      float64 `json:"goodness"`
	Verdict       string  `json:"verdict"`
	Reason        string  `json:"reason"`
}

// `validate --format json` on this host: the software and breakpoint
// kernels pass (faults per page, switches per round trip, task-clock per
// ns of CPU time, hits per watched write), the breakpoint not measurable
// with the capability probe's reason where watchpoints do not fire
// (internal/hostgate); the hardware kernels' events
// pass where the host has a PMU and are not measurable, with the kernel's
// reason, where it has none (check's hardware_counters says which).
func TestValidate(t *testing.T) {
	testenv.RequireRoot(t)
	out, err := exec.Command(binary, "validate", "--format=json").Output()
	exit := exitCode(t, err)
	var v struct {
		Events      []validationRow `json:"events"`
		Multiplexed []struct {
			Event     string  `json:"event"`
			MeanError float64 `json:"mean_error"`
			Reason    string  `json:"reason"`
		} `json:"multiplexing"`
		Samplers []struct {
			Sampler string `json:"sampler"`
			Figure  string `json:"figure"`
			Verdict string `json:"verdict"`
		} `json:"samplers"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	byEvent := map[string]validationRow{}
	for _, r := range v.Events {
		if r.Loop != "branch-signature" && strings.HasPrefix(r.Loop, "branch-") && byEvent[r.Event].Verdict != "" {
			continue // the signature row decides
		}
		byEvent[r.Event] = r
	}
	traps := testenv.HasFeature(t, hostgate.Watchpoints)
	for _, ev := range []string{"page-faults", "minor-faults", "major-faults", "context-switches", "task-clock", "cpu-migrations", "breakpoint"} {
		r, ok := byEvent[ev]
		if ev == "breakpoint" && !traps {
			// check has proven watchpoints dead here: not a failure.
			if r.Verdict != "not_measurable" || !strings.Contains(r.Reason, "capability probe") {
				t.Errorf("breakpoint where watchpoints do not fire: %+v, want not_measurable with the probe's reason", r)
			}
			continue
		}
		if !ok || r.Verdict != "pass" {
			t.Errorf("%s: %+v (present %v)", ev, r, ok)
		}
	}
	hw := hardwareCounters(t)
	for _, ev := range []string{"instructions", "cycles", "branches", "branch-misses"} {
		r := byEvent[ev]
		switch {
		case !hw && (r.Verdict != "not_measurable" || !strings.Contains(r.Reason, "does not provide this event")):
			t.Errorf("%s without a PMU: %+v, want not_measurable with the kernel's reason", ev, r)
		case hw && r.Verdict != "pass":
			t.Errorf("%s with a PMU: %+v", ev, r)
		}
	}
	// Multiplexing error of the hardware events: within 50% where there
	// is a PMU, not measured (with the kernel's reason) where there is none.
	if len(v.Multiplexed) != 4 {
		t.Errorf("multiplexing: %+v", v.Multiplexed)
	}
	for _, m := range v.Multiplexed {
		if (!hw && !strings.Contains(m.Reason, "does not provide this event")) || (hw && (m.Reason != "" || math.Abs(m.MeanError) > 0.5)) {
			t.Errorf("multiplexing error of %s: %+v", m.Event, m)
		}
	}
	// Both samplers every host has are judged on every figure, and the
	// page-fault sampler, exact by construction, passes each.
	figures := map[string]map[string]bool{}
	for _, r := range v.Samplers {
		if figures[r.Sampler] == nil {
			figures[r.Sampler] = map[string]bool{}
		}
		figures[r.Sampler][r.Figure] = true
		if r.Sampler == "page-faults" && r.Verdict != "pass" {
			t.Errorf("page-fault sampler: %+v", r)
		}
	}
	for _, name := range []string{"page-faults", "timer"} {
		if len(figures[name]) != 7 {
			t.Errorf("sampler %s judged on %v, want the 7 figures", name, figures[name])
		}
	}
	// It exits 1 where a verdict failed, and only then. The checks above
	// hold the events and the samplers every host has; a PMU sampler's
	// figure (PEBS, IBS, SPE) may fail on the hardware itself, as the
	// thesis found IBS's loads unstable: the exit says so, and the test
	// logs it for the first host that has one.
	failed := 0
	for _, r := range v.Events {
		if r.Verdict == "fail" {
			failed++
		}
	}
	for _, r := range v.Samplers {
		if r.Verdict == "fail" {
			failed++
			t.Logf("failed: %+v", r)
		}
	}
	if (exit == 1) != (failed > 0) {
		t.Errorf("validate exited %d with %d failed verdicts", exit, failed)
	}
	// The text form says the same, and why the hardware ones did not run.
	text, err := exec.Command(binary, "validate", "--quick").Output()
	if exitCode(t, err) != exit && failed == 0 {
		t.Errorf("validate --quick exited %d", exitCode(t, err))
	}
	bp := map[bool]string{true: "[pass] breakpoint on watched-writes", false: "[n/m]  breakpoint"}[traps]
	if !strings.Contains(string(text), bp) || (!hw && !strings.Contains(string(text), "No hardware counters here")) {
		t.Errorf("validate --quick:\n%s", text)
	}
}

// exitCode is a command's exit status: 0, or 1 (a failed verdict); any
// other failure ends the test.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return 1
	}
	t.Fatalf("validate: %v", err)
	return 0
}

// A bad --event is refused with exit 2, naming the spec.
func TestValidateBadEvent(t *testing.T) {
	out, err := exec.Command(binary, "validate", "--event", "cpu/event=0xc2").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `"cpu/event=0xc2"`) {
		t.Errorf("validate --event cpu/event=0xc2: %v\n%s", err, out)
	}
}

// hardwareCounters is check's verdict on this host's PMU.
func hardwareCounters(t *testing.T) bool {
	out, err := exec.Command(binary, "check", "--format=json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Features []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
		} `json:"features"`
	}
	json.Unmarshal(out, &r)
	for _, f := range r.Features {
		if f.Name == "hardware_counters" {
			return f.Available
		}
	}
	t.Fatal("check says nothing of hardware_counters")
	return false
}

// serve --validate.on-start runs the quick kernels beside the counting and
// exports their verdicts: the software and breakpoint events pass with
// goodness near 1; an event not measurable here has no series.
func TestServeValidateOnStart(t *testing.T) {
	testenv.RequireRoot(t)
	began := time.Now()
	p := start(t, nil, "--validate.on-start")
	hw := hardwareCounters(t)
	var passed map[string]float64
	// 2.5 s here alone; beside scripts/noisy, with CPU 1 taken offline
	// under the kernels, they were not done after 10 s once (not seen
	// again in 5 runs with a CPU offlined every 2 s): the test waits 30 s,
	// and says how long they took.
	for range 300 {
		_, mfs := p.scrape(t)
		passed = map[string]float64{}
		for _, m := range mfs["pmu_event_validation_passed"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" {
					passed[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		if len(passed) > 0 {
			t.Logf("validation verdicts exported %v after the exporter was launched", time.Since(began).Round(time.Millisecond))
			if g, ok := value(t, mfs, "pmu_event_validation_goodness", map[string]string{"event": "context-switches", "kernel": "pipe-round-trips"}); !ok || g < 0.9 {
				t.Errorf("goodness of context-switches: %v (present %v)", g, ok)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	traps := testenv.HasFeature(t, hostgate.Watchpoints)
	if _, ok := passed["breakpoint"]; !traps && ok {
		t.Errorf("pmu_event_validation_passed{event=\"breakpoint\"} exported where watchpoints do not fire (all: %v)", passed)
	}
	for _, ev := range []string{"page-faults", "context-switches", "task-clock", "breakpoint"} {
		if ev == "breakpoint" && !traps {
			continue
		}
		if passed[ev] != 1 {
			t.Errorf("pmu_event_validation_passed{event=%q} = %v (all: %v)\n%s", ev, passed[ev], passed, p.log)
		}
	}
	if _, ok := passed["instructions"]; ok == !hw {
		t.Errorf("instructions: series present %v on a host with hardware counters %v", ok, hw)
	}
	if !strings.Contains(p.log.String(), "validation kernels ran") {
		t.Errorf("the log does not say the kernels ran:\n%s", p.log)
	}
}

// check runs the quick kernels too and says how many events passed: the
// software ones every host counts, and none failed here; and, for each
// event it could not measure, why. A run during which another process took
// a CPU offline is done again (hotplugtest.Measure): the kernels move to
// another CPU, three times at most, and a noisy CI run once left two
// software events not measurable.
func TestCheckValidation(t *testing.T) {
	testenv.RequireRoot(t)
	var r struct {
		Validation struct {
			Passed, Failed int
			NotMeasurable  int `json:"not_measurable"`
			Failures       []validationRow
			Unmeasured     []validationRow `json:"not_measurable_events"`
		} `json:"validation"`
	}
	hotplugtest.Measure(t, func(int) {
		out, err := exec.Command(binary, "check", "--format=json").Output()
		if err != nil {
			t.Fatal(err)
		}
		r.Validation.Unmeasured = nil
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
	})
	v := r.Validation
	// Six software events, and the breakpoint where watchpoints fire.
	want := 6
	if testenv.HasFeature(t, hostgate.Watchpoints) {
		want++
	}
	if v.Passed < want || v.Failed != 0 || len(v.Unmeasured) != v.NotMeasurable {
		t.Errorf("check's validation: %+v", v)
	}
	for _, u := range v.Unmeasured {
		if u.Reason == "" {
			t.Errorf("%s is not measurable, check does not say why", u.Event)
		}
	}
}

// serve measures its own cost: the read cycles' CPU time on the reading
// thread (at most the process's, which the Go collector exports), the
// scrapes', the null-read calibration, and with --validate.on-start what
// each read adds to a CPU's context switches (present; its value is the
// difference of two windows of a shared CPU, which this test's own
// scrapes disturb: kernel/selftest checks it against the reader's own
// switches).
func TestServeSelfCost(t *testing.T) {
	testenv.RequireRoot(t)
	p := start(t, nil, "--validate.on-start") // reads every 100 ms: 2 s of perturbation windows
	var perRead float64
	var ok bool
	var mfs map[string]*dto.MetricFamily
	for range 100 {
		_, mfs = p.scrape(t)
		if perRead, ok = value(t, mfs, "pmu_self_read_perturbation", map[string]string{"event": "context-switches"}); ok {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !ok || math.IsNaN(perRead) || math.IsInf(perRead, 0) {
		t.Errorf("pmu_self_read_perturbation{event=\"context-switches\"} = %v (present %v)\n%s", perRead, ok, p.log)
	}
	read, _ := value(t, mfs, "pmu_self_cpu_seconds_total", map[string]string{"activity": "read"})
	cycles, _ := value(t, mfs, "pmu_self_activities_total", map[string]string{"activity": "read"})
	scrapes, _ := value(t, mfs, "pmu_self_activities_total", map[string]string{"activity": "scrape"})
	process, _ := value(t, mfs, "process_cpu_seconds_total", nil)
	median, hasMedian := value(t, mfs, "pmu_self_null_read_seconds", map[string]string{"statistic": "median"})
	t.Logf("%v read cycles, %.4f s of CPU (%.1f µs each), %v scrapes; process %.2f s; null read median %v s; each read adds %.2f context switches",
		cycles, read, read/max(cycles, 1)*1e6, scrapes, process, median, perRead)
	if cycles < 2 || read <= 0 || read > process+0.01 || scrapes < 1 || !hasMedian || median <= 0 {
		t.Errorf("self cost: %v cycles, %v s read CPU, %v scrapes, process %v s, null read median %v (present %v)", cycles, read, scrapes, process, median, hasMedian)
	}
}
