package collector

import (
	"bytes"
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/expfmt"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from what the code produces now")

// goldenArgs serve a recording with Top-Down, a container and memory samples:
// every family a replay can export.
var goldenArgs = []string{"serve", "--source=replay", "--replay.file=../replay/testdata/skx-handmade.csv", "--replay.uarch=skx",
	"--replay.samples=../examples/replay/skx-c2c.data"}

// goldenPlatformArgs serve a recording of the platform PMUs: the node
// families (energy, MSRs, C-states, memory and NUMA traffic, the peak).
var goldenPlatformArgs = []string{"serve", "--source=replay", "--replay.file=../replay/testdata/platform-handmade.csv",
	"--collector.platform.memory-peak=1e11"}

// parse binds the options to a command line as the binary does and parses
// args.
func parse(t *testing.T, args []string) *Options {
	t.Helper()
	o := NewOptions()
	app := kingpin.New("pmu_exporter", "")
	app.Terminate(nil)
	o.Bind(app.Command("serve", "").Default(), app.Command("check", ""))
	if _, err := app.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o
}

// TestGoldenExposition is the whole /metrics surface of a replay after three
// recorded intervals, as node_exporter's e2e fixture is for its collectors:
// a change to any family, label or value shows in review as a change to
// testdata/replay.prom, and of the platform recording to
// testdata/replay-platform.prom (regenerate with go test -run Golden
// -update). Only what a build or the Go runtime decides is left out:
// pmu_build_info, go_* and process_*; and the collectors' durations read 0.
func TestGoldenExposition(t *testing.T) {
	for file, args := range map[string][]string{"testdata/replay.prom": goldenArgs, "testdata/replay-platform.prom": goldenPlatformArgs} {
		golden(t, file, args)
	}
}

func golden(t *testing.T, file string, args []string) {
	got := goldenText(t, args)
	if again := goldenText(t, args); again != got {
		t.Fatalf("two replays of %v gave different expositions", args)
	}
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the exposition differs from %s (go test -run Golden -update rewrites it; review the diff):\n%s", file, lineDiff(string(want), got))
	}
}

func goldenText(t *testing.T, args []string) string {
	t.Helper()
	o := parse(t, args)
	o.Resolve()
	p, err := replayPipeline(*o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		p.step()
	}
	mfs, err := NewRegistry(p, 0).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if n := mf.GetName(); n == "pmu_build_info" || strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		if mf.GetName() == "pmu_collector_duration_seconds" {
			for _, m := range mf.GetMetric() {
				m.GetGauge().Value = new(float64)
			}
		}
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// The flags' old names, in node_exporter's collector on/off namespace, still
// work, say they are deprecated, and yield to the new names.
func TestDeprecatedFlagNames(t *testing.T) {
	for _, c := range []struct {
		args     []string
		perCPU   bool
		interval string
		notes    int
	}{
		{[]string{"serve", "--collector.per-cpu", "--collector.interval=250ms"}, true, "250ms", 2},
		{[]string{"serve", "--cgroup.depth=2", "--topdown.uarch=skx", "--sampling.period=99"}, false, "1s", 3},
		{[]string{"serve", "--collector.counting.per-cpu", "--collector.counting.interval=2s"}, true, "2s", 0},
		{[]string{"serve", "--no-collector.per-cpu", "--collector.counting.per-cpu", "--collector.interval=3s", "--collector.counting.interval=4s"}, true, "4s", 2},
		{[]string{"serve"}, false, "1s", 0},
	} {
		o := parse(t, c.args)
		notes := o.Resolve()
		if o.perCPU != c.perCPU || o.interval.String() != c.interval || len(notes) != c.notes {
			t.Errorf("%v: per-cpu %v, interval %v, notes %q; want %v, %s, %d notes", c.args, o.perCPU, o.interval, notes, c.perCPU, c.interval, c.notes)
		}
	}
}
