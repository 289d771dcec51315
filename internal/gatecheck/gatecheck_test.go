package gatecheck

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every test of this module that needs a feature the host gate judges
// asks the gate for it: a test added without its gate fails here, on
// every machine, before it fails on the machines of the pool that lack
// the feature.
func TestEveryFeatureNeedIsGated(t *testing.T) {
	m, err := Load("../..", "internal/hostgate")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Check(Rules()) {
		t.Error(f)
	}
	for feature, tests := range m.Needs(Rules()) {
		t.Logf("%s: %d tests need it: %s", feature, len(tests), strings.Join(tests, ", "))
	}
}

// The checker on a module written for it (testdata/mod): each test's
// comment says whether it must be found; found by a flag through a helper
// and a method, by a call in a package's own tests, and not where a
// helper, internal/testenv's own helper or HasFeature gates it.
func TestCheckFindsUngatedTests(t *testing.T) {
	m, err := Load("testdata/mod", "internal/hostgate")
	if err != nil {
		t.Fatal(err)
	}
	rules := []Rule{
		{Feature: "watchpoints", All: []*regexp.Regexp{regexp.MustCompile(`^lit:--collector\.comm\.(watchpoints|reuse)(=true)?$`)}},
		{Feature: "watchpoints", All: []*regexp.Regexp{regexp.MustCompile(`^call:example\.com/mod/kernel/watch\.TrapCost$`)}},
		{Feature: "cpu_hotplug", All: []*regexp.Regexp{regexp.MustCompile(`^lit:/sys/devices/system/cpu/cpu[0-9]+/online$`)}},
	}
	var got []string
	for _, f := range m.Check(rules) {
		got = append(got, f.Test+" "+f.Feature)
	}
	want := []string{
		"cmd/app.TestHotplugUngated cpu_hotplug",
		"cmd/app.TestUngatedThroughHelper watchpoints",
		"cmd/app.TestUngatedThroughMethod watchpoints",
		"kernel/watch.TestCostUngated watchpoints",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	needs := m.Needs(rules)["watchpoints"]
	if want := []string{"cmd/app.TestFollows", "cmd/app.TestGatedInHelper", "cmd/app.TestUngatedThroughHelper", "cmd/app.TestUngatedThroughMethod", "kernel/watch.TestCostUngated"}; !slices.Equal(needs, want) {
		t.Errorf("needing watchpoints: %v, want %v", needs, want)
	}
}
