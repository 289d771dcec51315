// Package treetest is the setup tests repeat around metric trees: a
// definition written in the test, parsed and compiled, and this host's PMUs
// to plan its groups on.
package treetest

import (
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// Compile parses the YAML definition src (named name in errors) and
// compiles it; any error fails the test.
func Compile(t testing.TB, name, src string) (*metric.Definition, *metric.Tree) {
	t.Helper()
	d, err := metric.Parse(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := d.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return d, tr
}

// HostPMUs are this host's PMUs, from /sys.
func HostPMUs(t testing.TB) []*pmu.PMU {
	t.Helper()
	pmus, err := pmu.Discover("/sys")
	if err != nil {
		t.Fatal(err)
	}
	return pmus
}
