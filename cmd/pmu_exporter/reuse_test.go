package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
)

// `reuse --trace` on a RIBench trace written to a file: the JSON shape,
// every sample accounted for, and the estimated histogram within the
// thesis' accuracy of the trace's own reuse pairs.
func TestReuseCommandOnTrace(t *testing.T) {
	c := reuse.Cases[4] // multi-modal
	c.Outer, c.Invalidate = 8, 0.2
	path := filepath.Join(t.TempDir(), "trace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "# RIBench multi-modal, 2 threads, 20% of walks invalidated by tids 1001, 1002")
	truth := c.Generate(2, 5, func(a reuse.Access) {
		op := "R"
		if a.Write {
			op = "W"
		}
		fmt.Fprintf(w, "%d %s %#x %d\n", a.TID, op, a.Addr, a.Size)
	})
	w.Flush()
	f.Close()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"reuse", "--trace", path, "--period", "64", "--format", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The trace as an argument, as samples, c2c and comm take their files
	// (issue 57): the same run.
	var asArg bytes.Buffer
	if code := run([]string{"reuse", "--period", "64", "--format", "json", path}, &asArg, &stderr); code != 0 || asArg.String() != stdout.String() {
		t.Errorf("reuse FILE: exit %d, %d bytes against --trace's %d: %s", code, asArg.Len(), stdout.Len(), stderr.String())
	}
	var out reuseJSON
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if out.Mode != "private" || out.Unit != "accesses" || out.Samples == 0 || out.Reuses == 0 || out.Invalidations == 0 {
		t.Errorf("%+v", out)
	}
	var observed uint64
	for _, c := range out.Observed {
		observed += c
	}
	if observed != out.Reuses {
		t.Errorf("observed bins hold %d reuses, reuses = %d", observed, out.Reuses)
	}
	// Walks alternate reads and writes: reuses are WAR and RAW, at the
	// same address, and the remote writers' (sampled too: they only
	// store) WAW; never RAR; the pairs add up to the histogram.
	var pairs, hist uint64
	for _, n := range out.Pairs {
		pairs += n
	}
	for _, n := range out.TimeDistanceLog2 {
		hist += n
	}
	if out.Pairs["RAR"] != 0 || out.Pairs["RAW"] == 0 || out.Pairs["WAR"] == 0 || out.Locality["spatial"] != 0 ||
		math.Abs(float64(pairs)-float64(hist)) > 4 || math.Abs(float64(out.Locality["temporal"])-float64(hist)) > 4 {
		t.Errorf("pairs %v, locality %v; histogram %d reuses", out.Pairs, out.Locality, hist)
	}
	// The remote writers are sampled too here (the command samples every
	// thread), so only the histogram's shape is compared.
	// The bins' shares, the other outcomes' and the not resolved sum to
	// 1; each bin's interval holds its share; S counts the not resolved
	// share as wrong.
	var bins []float64
	sum := out.Invalidated.Share + out.Ended.Share + out.Unreused + out.NotResolved
	for _, b := range out.Distances {
		for len(bins) < bits.Len64(b.From) {
			bins = append(bins, 0)
		}
		bins[bits.Len64(b.From)-1] = b.Share
		sum += b.Share
		if b.Observed > 0 && !(b.Low <= b.Share && b.Share <= b.High && b.High > b.Low) {
			t.Errorf("bin %+v: the interval does not hold the share", b)
		}
	}
	if math.Abs(sum-1) > 1e-4 {
		t.Errorf("shares sum to %.6f", sum)
	}
	reused := 1 - out.Invalidated.Share - out.Ended.Share - out.Unreused
	for k := range bins {
		bins[k] /= reused
	}
	if s := reuse.Accuracy(truth.Fractions(), bins); s < 0.85 {
		t.Errorf("S = %.3f against the trace's pairs %v: %v", s, truth.Fractions(), bins)
	}
}

func TestReuseCommandErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	os.WriteFile(path, []byte("1 R 0x10 8\n1 Q 0x10 8\n"), 0o644)
	for args, want := range map[string]string{
		"--trace " + path:                                 "line 2: access \"Q\": want R or W",
		"--trace /nonexistent":                            "no such file",
		"--trace " + path + " --mode shared":              "--domain: shared mode needs",
		"--trace " + path + " --mode shared --domain 1=x": "want TID=DOMAIN",
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"reuse"}, strings.Fields(args)...), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("reuse %s: exit %d, %q; want %q", args, code, stderr.String(), want)
		}
	}
}

// `reuse --cache`: uniformly random accesses to N lines, so an LRU cache of
// c lines misses 1 − c/N of them; the command predicts it from the sampled
// reuse times, and its stack distances hold as many reuses as its time
// distances.
func TestReuseCommandMissRatio(t *testing.T) {
	const N = 1024
	rng := rand.New(rand.NewPCG(7, 8))
	var trace strings.Builder
	for range 1_000_000 { // the tail past 2 Ki accesses, which the miss ratio at 768 lines rests on, needs them
		fmt.Fprintf(&trace, "1 R %#x 8\n", 0x10000+64*rng.Uint64N(N))
	}
	path := filepath.Join(t.TempDir(), "trace")
	if err := os.WriteFile(path, []byte(trace.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := []string{"reuse", "--trace", path, "--period", "32", "--format", "json", "--cache", "256", "--cache", "768"}
	if code := run(cmd, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var out reuseJSON
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	for _, c := range []float64{256, 768} {
		got, ok := out.MissRatio[fmt.Sprint(c)]
		if want := 1 - c/N; !ok || math.Abs(got-want) > 0.05 {
			t.Errorf("miss ratio of %v lines = %v (present %v), want %.3f", c, got, ok, want)
		}
	}
	var timeSum, stackSum float64
	for _, c := range out.TimeDistanceLog2 {
		timeSum += float64(c)
	}
	for _, c := range out.StackDistanceLog2 {
		stackSum += float64(c)
	}
	if timeSum == 0 || math.Abs(stackSum-timeSum) > 0.01*timeSum+float64(len(out.TimeDistanceLog2)) {
		t.Errorf("stack distances hold %v reuses, time distances %v", stackSum, timeSum)
	}
}
