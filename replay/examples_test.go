package replay

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
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
	for gen, file := range map[string]string{"skx": "skx-synthetic.csv", "c2c": "skx-c2c.data", "platform": "skx-platform.csv", "spe": "n1-spe.data", "trace": "reuse-trace.txt"} {
		cmd := exec.Command("go", "run", "./internal/examplegen/"+gen)
		cmd.Dir = ".."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go run %s: %v", gen, err)
		}
		have, err := os.ReadFile("../examples/replay/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, have) {
			t.Errorf("examples/replay/%s differs from %s's output: regenerate it (go run ./internal/examplegen/%s > examples/replay/%s)", file, gen, gen, file)
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
	c.File() // counts the samples internal/examplegen/c2c writes
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
	// Its caches, as perf's header dump prints them ("L3 Unified 22528K
	// [0-1]"), are what the exporter's reader takes from HEADER_CACHE.
	out, err = exec.Command(perf, "report", "-i", file, "--header-only", "-I").CombinedOutput()
	if err != nil {
		t.Fatalf("perf report --header-only: %v\n%s", err, out)
	}
	var perfSays []string
	for _, m := range regexp.MustCompile(`(?m)^#\s+L(\d+)\s+(\S+)\s+(\S+)\s+\[([^\]]+)\]`).FindAllStringSubmatch(string(out), -1) {
		perfSays = append(perfSays, strings.Join(m[1:], " "))
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pd, err := perfdata.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, c := range pd.Caches {
		ours = append(ours, fmt.Sprintf("%d %s %s %s", c.Level, c.Type, c.Size, c.SharedCPUs))
	}
	if len(perfSays) == 0 || strings.Join(ours, "; ") != strings.Join(perfSays, "; ") {
		t.Errorf("caches: ours %q, perf's header %q", ours, perfSays)
	}
}

// perf reads the synthetic Arm SPE recording: perf script --itrace=M makes
// a memory sample of every load and store written, and perf c2c report
// (ranking by peer snoops, as on Arm by default) finds the benchmark's two
// lines with the peer loads written, the slots' line first. --no-source:
// perf 6.1 dies of SIGPIPE when its addr2line reader meets the missing
// binary of an aarch64 recording.
func TestPerfReadsSPEExample(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	const file = "../examples/replay/n1-spe.data"
	c := perffile.SPEC2C{F: 0.7, Threads: 4, Iters: 20000, Period: 50, PID: 4242, Seed: 1}
	c.File() // counts the samples internal/examplegen/spe writes
	out, err := exec.Command(perf, "script", "-i", file, "--itrace=M").CombinedOutput()
	if err != nil {
		t.Fatalf("perf script: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), " memory: "); n != c.Loads+c.Stores || c.PeerCore == 0 || c.PeerClustr == 0 {
		t.Errorf("perf script made %d memory samples, want %d (%d of the loads from a peer core, %d from the peer cluster):\n%s",
			n, c.Loads+c.Stores, c.PeerCore, c.PeerClustr, firstLines(out, 5))
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(perf, "c2c", "report", "-i", abs, "--stdio", "--no-source")
	cmd.Dir = t.TempDir()
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("perf c2c report: %v\n%s", err, firstLines(out, 20))
	}
	peer := regexp.MustCompile(`Load HIT Local Peer\s*:\s*(\d+)`).FindSubmatch(out)
	rows := regexp.MustCompile(`(?m)^\s+\d+\s+(0x[0-9a-f]+)\s+N/A\s+\d+\s+[\d.]+%`).FindAllSubmatch(out, -1)
	if !strings.Contains(string(out), "Cachelines sort on                : Peer Snoop") || peer == nil ||
		string(peer[1]) != strconv.Itoa(c.PeerCore+c.PeerClustr) || len(rows) != 2 || string(rows[0][1]) != fmt.Sprintf("%#x", c.SlotLine) {
		t.Errorf("perf c2c report, want %d local peer loads on 2 lines, %#x first:\n%s", c.PeerCore+c.PeerClustr, c.SlotLine, firstLines(out, 80))
	}
}

func firstLines(b []byte, n int) string {
	l := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}
