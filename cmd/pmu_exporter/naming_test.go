package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// unitDebt are the families whose unit still varies within the family,
// each with how: the deprecated names kept for one release beside the
// families that split them by unit (issue 57, CHANGELOG.md). The test fails
// on any other, and on one of these that no longer needs its entry, so the
// list only shrinks.
var unitDebt = map[string]string{
	"pmu_sampling_period":          "events, or nanoseconds for the clock events: deprecated for pmu_sampling_period_events and _seconds, kept one release",
	"pmu_comm_domain_volume_total": "as pmu_comm_volume_total",
	"pmu_comm_volume_total":        "sampled nanoseconds for source=decode, accesses for pebs, ibs and spe: deprecated for pmu_comm_sampled_seconds_total and pmu_comm_accesses_estimated_total, kept one release",
	"pmu_cgroup_comm_volume_total": "as pmu_comm_volume_total",
}

// unitValue is a label value that spells a unit (thread_cpu_seconds,
// bytes): a family whose label says in what unit a value is holds several
// units under one name.
var unitValue = regexp.MustCompile(`(^|_)(seconds|nanoseconds|microseconds|milliseconds|bytes|joules|watts|hertz|celsius|volts|amperes)$`)

// nonBase are unit words that are not Prometheus's base units.
var nonBase = regexp.MustCompile(`_(milliseconds|microseconds|nanoseconds|ms|us|ns|kilobytes|megabytes|gigabytes|kib|mib|gib|kb|mb|percent|minutes|hours)(_total)?$`)

// TestExpositionNaming holds the live and the replay exposition to
// Prometheus's naming rules: base units in the name, _total on every
// counter, no label named unit or whose values spell one, and a unit that
// varies within a family only where unitDebt says so.
func TestExpositionNaming(t *testing.T) {
	testenv.RequireRoot(t)
	expositions := map[string]map[string]*dto.MetricFamily{}
	p := start(t, nil)
	time.Sleep(300 * time.Millisecond)
	_, expositions["live"] = p.scrape(t)
	// A replay with every replayed family: Top-Down, cgroups, precise
	// samples, and an access trace (the reuse families).
	replay := start(t, nil, "--source=replay", "--replay.file=../../examples/replay/skx-synthetic.csv", "--replay.uarch=skx",
		"--replay.samples=../../examples/replay/skx-c2c.data", "--replay.trace=../../examples/replay/reuse-trace.txt")
	_, expositions["replay"] = replay.scrape(t)
	seen := map[string]bool{}
	for where, mfs := range expositions {
		for name, mf := range mfs {
			if !strings.HasPrefix(name, "pmu_") {
				continue
			}
			seen[name] = true
			if mf.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
				t.Errorf("%s: counter %s does not end in _total", where, name)
			}
			if nonBase.MatchString(name) {
				t.Errorf("%s: %s is not in base units (seconds, bytes, ratios)", where, name)
			}
			if l := unitLabel(mf); l != "" {
				t.Errorf("%s: %s has a label that holds a unit (%s): a unit belongs in the name", where, name, l)
			}
		}
	}
	for name := range unitDebt {
		if !seen[name] {
			t.Errorf("%s is in unitDebt but in neither exposition: remove its entry", name)
		}
	}
}

// unitLabel is a label of mf's series that holds a unit, as name=value
// ("" where none does).
func unitLabel(mf *dto.MetricFamily) string {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "unit" || unitValue.MatchString(l.GetValue()) {
				return l.GetName() + "=" + l.GetValue()
			}
		}
	}
	return ""
}
