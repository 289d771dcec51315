package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// check's and validate's --help fit a screen (issue 57: 302 and 310
// lines, every collector flag in them), saying where the collector flags
// are, which --help-long lists; the top-level --help names the exporter's
// flags by group, since serve is what runs without a command.
func TestHelpIsShort(t *testing.T) {
	help := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		run(args, &stdout, &stderr)
		return stdout.String() + stderr.String()
	}
	for _, cmd := range judges {
		short := help(cmd, "--help")
		if n := strings.Count(short, "\n"); n >= 60 || strings.Contains(short, "--collector.comm.period") ||
			!strings.Contains(short, "pmu_exporter "+cmd+" --help-long lists them") || !strings.Contains(short, "--path.sysfs") {
			t.Errorf("%s --help: %d lines:\n%s", cmd, n, short)
		}
		// kingpin writes the long help to the process's standard output.
		if long, _ := exec.Command(binary, cmd, "--help-long").CombinedOutput(); !strings.Contains(string(long), "--collector.comm.period") {
			t.Errorf("%s --help-long does not list the collector flags", cmd)
		}
	}
	top := help("--help")
	for _, want := range []string{"The exporter's flags (serve, the default command)", "--collector.comm.*: ", "--web.*: "} {
		if !strings.Contains(top, want) {
			t.Errorf("--help lacks %q:\n%s", want, top)
		}
	}
	if serve := help("serve", "--help"); !strings.Contains(serve, "--collector.comm.period") {
		t.Error("serve --help does not list the collector flags")
	}
}
