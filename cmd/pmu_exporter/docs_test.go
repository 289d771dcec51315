package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestDocsNameOnlyWhatExists: every pmu_* series, every dotted --flag and
// every default the hand-written docs quote is one the binary has, as its
// generated references say (docs/reference, held to the code by
// TestMetricsReference and TestFlagsReference). Issue 57 found docs naming
// series that do not exist and a default the binary does not have.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	ref := func(name string) string {
		b, err := os.ReadFile(filepath.Join("../../docs/reference", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The series, and the labels that begin pmu_ (pmu_info's pmu_name).
	metrics := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(pmu_[a-z0-9_]+)` \\| ([^|]*) \\|").FindAllStringSubmatch(ref("metrics.md"), -1) {
		metrics[m[1]] = true
		for _, l := range strings.Split(m[2], ",") {
			metrics[strings.TrimSpace(l)] = true
		}
	}
	// The shipped recording rules' series (level:pmu_metric:operations).
	rules, err := os.ReadFile("../../deploy/prometheus/pmu_exporter.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, m := range regexp.MustCompile(`record: ([a-z_]+:pmu_[a-z0-9_]+:[a-z0-9_]+)`).FindAllStringSubmatch(string(rules), -1) {
		recorded[m[1]] = true
	}
	// Every flag the command line takes, hidden ones (old names) too,
	// with its defaults over every command, and its environment variable.
	defaults, envars := map[string]map[string]bool{}, map[string]string{}
	var c cli
	model := newApp(&c, io.Discard).Model()
	add := func(flags []*kingpin.FlagModel) {
		for _, f := range flags {
			if defaults[f.Name] == nil {
				defaults[f.Name] = map[string]bool{}
			}
			defaults[f.Name][strings.Join(f.Default, ",")] = true
			if f.Envar != "" {
				envars[f.Name] = f.Envar
			}
		}
	}
	add(model.Flags)
	for _, cmd := range model.Commands {
		add(cmd.Flags)
	}
	if len(metrics) < 100 || len(defaults) < 100 {
		t.Fatalf("read %d metrics from docs/reference and %d flags from the command line", len(metrics), len(defaults))
	}
	// Other programs' flags the docs quote: node_exporter's, beside which
	// docs/benchmarks.md measures.
	peers := map[string]bool{"collector.disable-defaults": true, "collector.perf": true,
		"collector.perf.disable-hardware-profilers": true, "collector.perf.disable-cache-profilers": true}
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md", "../../DEVELOPERS.md", "../../CHANGELOG.md")
	metricRef := regexp.MustCompile(`([a-z_]+:)?\bpmu_[a-z0-9_]*[a-z0-9]\b(:[a-z0-9_]+)?(\*?)`)
	flagRef := regexp.MustCompile(`--(?:no-)?([a-z][a-z0-9-]*(?:\.[a-z0-9-]*[a-z0-9])+)(-?\*?)`)
	flagRow := regexp.MustCompile("(?m)^\\| `--([a-z0-9.-]+)` \\| `([^`]*)` \\|")
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text, name := string(b), filepath.Base(doc)
		for _, m := range metricRef.FindAllStringSubmatch(text, -1) {
			switch {
			case m[3] == "*" || strings.HasPrefix(m[0], "pmu_exporter"): // a family of names (pmu_self_*), the binary
				continue
			case m[1] != "" || m[2] != "": // a recording rule's
				if !recorded[m[0]] {
					t.Errorf("%s names %s, which the shipped recording rules do not record", name, m[0])
				}
				continue
			}
			base := m[0]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed, ok := strings.CutSuffix(base, suffix); ok && metrics[trimmed] {
					base = trimmed
				}
			}
			if !metrics[base] {
				t.Errorf("%s names %s, which the exporter does not serve (docs/reference/metrics.md)", name, m[0])
			}
		}
		for _, m := range flagRef.FindAllStringSubmatch(text, -1) {
			if m[2] != "" || peers[m[1]] { // a family of flags (--collector.comm.reuse-*), another program's
				continue
			}
			if defaults[m[1]] == nil {
				t.Errorf("%s names --%s, which no command takes (docs/reference/flags.md)", name, m[1])
			}
		}
		for _, m := range flagRow.FindAllStringSubmatch(text, -1) {
			if d := defaults[m[1]]; d != nil && !d[m[2]] && m[2] != "$"+envars[m[1]] {
				t.Errorf("%s gives --%s the default %q; the binary's is %v", name, m[1], m[2], keys(d))
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
