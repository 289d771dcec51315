package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/comm/reuse"
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
	// The remote writers are sampled too here (the command samples every
	// thread), so only the histogram's shape is compared.
	if s := reuse.Accuracy(truth.Fractions(), out.TimeDistanceLog2); s < 0.85 {
		t.Errorf("S = %.3f against the trace's pairs %v: %v", s, truth.Fractions(), out.TimeDistanceLog2)
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
