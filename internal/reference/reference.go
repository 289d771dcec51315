// Package reference locates the public PMU reference data (Intel perfmon JSON,
// Linux perf pmu-events JSON) that tests read from ../shared/reference. The
// shipped binary never needs it; tests use it as an independent source of facts.
package reference

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir finds shared/reference by walking up from the working directory. Outside CI
// a missing copy skips the test; under PMU_EXPORTER_CI=1 it fails.
func Dir(t testing.TB) string {
	t.Helper()
	return shared(t, "reference", "the reference data")
}

// Recordings finds shared/recordings, the real perf.data files recorded on
// other machines (its README says what each holds), as Dir finds the
// reference data.
func Recordings(t testing.TB) string {
	t.Helper()
	return shared(t, "recordings", "the recordings")
}

// shared finds ../shared/name above the working directory.
func shared(t testing.TB, name, what string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "..", "shared", name)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if os.Getenv("PMU_EXPORTER_CI") != "" {
		t.Fatalf("../shared/%s not found: CI must have %s beside the checkout", name, what)
	}
	t.Skipf("../shared/%s not found (PMU_EXPORTER_CI unset)", name)
	return ""
}

// Event is the subset of an event definition the tests use; Intel and Linux perf
// JSON share these field names, all as strings.
type Event struct {
	EventName   string
	EventCode   string
	UMask       string
	CounterMask string
	Invert      string
	EdgeDetect  string
	AnyThread   string
	Counter     string
	// MSRIndex and MSRValue are Intel's extra register and its value: the
	// offcore response (0x1a6,0x1a7), load latency (0x3f6), frontend
	// (0x3f7).
	MSRIndex, MSRValue string
	// RdWrMask is AMD's UMC read/write selector (perf's JSON).
	RdWrMask string
}

// Events reads an event file: Intel's {"Events": [...]} or Linux's bare array.
func Events(t testing.TB, path string) []Event {
	t.Helper()
	return wrappedOrBare[Event](t, path, "Events")
}

// wrappedOrBare reads a JSON file that is either {key: [...]} (Intel's) or
// the bare array (perf's).
func wrappedOrBare[T any](t testing.TB, path, key string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wrapped map[string]json.RawMessage
	if err := json.Unmarshal(b, &wrapped); err == nil && wrapped[key] != nil {
		b = wrapped[key]
	}
	var list []T
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", path, err))
	}
	return list
}

// Metric is the subset of a metric definition the tests use: Intel's
// (MetricName, Formula, its Events' aliases) and perf's (MetricExpr).
type Metric struct {
	MetricName string
	Formula    string
	MetricExpr string
	ScaleUnit  string // perf's: what one unit of MetricExpr is
	Events     []struct{ Name, Alias string }
}

// Metrics reads a metric file: Intel's {"Metrics": [...]} or perf's bare
// array.
func Metrics(t testing.TB, path string) []Metric {
	t.Helper()
	return wrappedOrBare[Metric](t, path, "Metrics")
}
