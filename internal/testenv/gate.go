package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
)

// The host gate's files: the verdicts scripts/test measures once per run
// (internal/hostgate/measure), and the log each gated test appends its
// outcome to, which the run's closing table counts.
const (
	gateEnv    = "PMU_EXPORTER_HOSTGATE"
	gateLogEnv = "PMU_EXPORTER_GATE_LOG"
)

// gate measures or reads this host's verdicts once per test binary.
var gate = sync.OnceValues(loadGate)

// loadGate reads the verdicts scripts/test measured, or measures them: with
// the prebuilt hostgate program beside the exporter (a bundle, no Go
// toolchain), else with go run from the module's root.
func loadGate() (hostgate.Report, error) {
	if p := os.Getenv(gateEnv); p != "" {
		return hostgate.Read(p)
	}
	dir, err := os.MkdirTemp("", "hostgate")
	if err != nil {
		return hostgate.Report{}, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "verdicts.json")
	var cmd *exec.Cmd
	if pre := os.Getenv("PMU_EXPORTER_PREBUILT"); pre != "" {
		cmd = exec.Command(filepath.Join(pre, "hostgate"), "-o", out)
	} else {
		root, err := moduleRoot()
		if err != nil {
			return hostgate.Report{}, err
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = "/usr/local/go/bin/go"
		}
		cmd = exec.Command(goBin, "run", "./internal/hostgate/measure", "-o", out)
		cmd.Dir = root
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return hostgate.Report{}, fmt.Errorf("measuring the host's features (%s): %v\n%s", cmd, err, b)
	}
	return hostgate.Read(out)
}

// moduleRoot is the directory above the working directory (a test's
// package) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// RequireFeature gates a test on a host feature that varies between
// machines (hostgate.Features): where the exporter's probe and its oracle
// both find it, the test runs and must pass, in CI as anywhere; where both
// find it absent, the test is skipped with their proof, in CI too, since
// the absence is proven; where they disagree, the test fails.
func RequireFeature(t testing.TB, feature string) {
	t.Helper()
	v := verdict(t, feature)
	if v.State() == hostgate.Present {
		logUse(t, hostgate.Use{Feature: feature, Test: testID(t), Outcome: hostgate.Ran})
		return
	}
	logUse(t, hostgate.Use{Feature: feature, Test: testID(t), Outcome: hostgate.Skipped})
	t.Skipf("%s is absent on this host (%s)", feature, v.Proof())
}

// HasFeature is the gate's verdict for a test whose expectations follow the
// feature (a probe's expected answer) rather than need it. It logs the
// test's use, and fails the test where the verdict is disputed.
func HasFeature(t testing.TB, feature string) bool {
	t.Helper()
	v := verdict(t, feature)
	logUse(t, hostgate.Use{Feature: feature, Test: testID(t), Outcome: hostgate.Followed})
	return v.State() == hostgate.Present
}

// verdict is the gate's verdict on feature; a disputed one fails the test.
func verdict(t testing.TB, feature string) hostgate.Verdict {
	t.Helper()
	r, err := gate()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := r.Verdict(feature)
	if !ok {
		t.Fatalf("the host gate knows no feature %q (hostgate.Features)", feature)
	}
	if v.State() == hostgate.Disputed {
		t.Fatalf("%s: the exporter's probe and an independent oracle disagree on this host: %s", feature, v.Proof())
	}
	return v
}

// testID names the test with its package directory under the module.
func testID(t testing.TB) string {
	wd, _ := os.Getwd()
	if root, err := moduleRoot(); err == nil {
		if rel, err := filepath.Rel(root, wd); err == nil {
			return rel + "." + t.Name()
		}
	}
	return t.Name()
}

// logUse appends u to the run's gate log, where scripts/test keeps one.
func logUse(t testing.TB, u hostgate.Use) {
	p := os.Getenv(gateLogEnv)
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("gate log: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteString(hostgate.FormatUse(u)); err != nil {
		t.Fatalf("gate log: %v", err)
	}
}
