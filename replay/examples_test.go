package replay

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// Every example recording loads, and its header says whether it was recorded
// (and where) or is synthetic.
func TestExampleRecordings(t *testing.T) {
	files, _ := filepath.Glob("../examples/replay/*.csv")
	if len(files) < 2 {
		t.Fatalf("example recordings: %v", files)
	}
	for _, f := range files {
		rec := load(t, f)
		if len(rec.Header) == 0 || !(strings.HasPrefix(rec.Header[0], "Synthetic") || strings.HasPrefix(rec.Header[0], "Recorded")) {
			t.Errorf("%s: header does not start by saying Synthetic or Recorded: %q", f, rec.Header)
		}
	}
}

// The synthetic examples are what their generators write.
func TestSyntheticExamplesAreGenerated(t *testing.T) {
	for gen, file := range map[string]string{"gen_skx.go": "skx-synthetic.csv", "gen_c2c.go": "skx-c2c.data"} {
		cmd := exec.Command("go", "run", gen)
		cmd.Dir = "../examples/replay"
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go run %s: %v", gen, err)
		}
		have, err := os.ReadFile("../examples/replay/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, have) {
			t.Errorf("examples/replay/%s differs from %s's output: regenerate it (go run %s > %s)", file, gen, gen, file)
		}
	}
}

// perf itself reads the synthetic perf c2c recording: perf script prints
// every sample (as many as the exporter's own reader finds), and perf c2c
// report finds the benchmark's two shared lines.
func TestPerfReadsC2CExample(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	const file = "../examples/replay/skx-c2c.data"
	c := perffile.C2C{F: 0.7, Threads: 4, Iters: 20000, Period: 50, PID: 4242, Heap: 0x5555_0000_0000, Seed: 1}
	c.File() // counts the samples gen_c2c writes
	out, err := exec.Command(perf, "script", "-i", file).CombinedOutput()
	if err != nil {
		t.Fatalf("perf script: %v\n%s", err, out)
	}
	lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1
	if lines != c.Loads+c.Stores || strings.Contains(string(out), "failed to process") {
		t.Errorf("perf script printed %d lines, want %d samples:\n%s", lines, c.Loads+c.Stores, firstLines(out, 5))
	}
	out, err = exec.Command(perf, "c2c", "report", "-i", file, "--stdio").CombinedOutput()
	if err != nil {
		t.Fatalf("perf c2c report: %v\n%s", err, firstLines(out, 20))
	}
	if !regexp.MustCompile(`Total Shared Cache Lines\s*:\s*2\b`).Match(out) {
		t.Errorf("perf c2c report does not find the 2 shared lines:\n%s", firstLines(out, 60))
	}
}

func firstLines(b []byte, n int) string {
	l := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}
