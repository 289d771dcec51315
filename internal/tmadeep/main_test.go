package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// The committed analysis/topdown/defs/deep files are what tmadeep makes
// of the reference now: regenerating changes nothing.
func TestDeepFilesAreRegenerated(t *testing.T) {
	ref := reference.Dir(t)
	for _, uarch := range names() {
		var b strings.Builder
		if err := run(&b, uarch, ref); err != nil {
			t.Fatalf("%s: %v", uarch, err)
		}
		path := filepath.Join("..", "..", "analysis", "topdown", "defs", "deep", uarch+".yaml")
		committed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(committed) != b.String() {
			t.Errorf("%s differs from what `go run ./internal/tmadeep -uarch %s` writes: regenerate it", path, uarch)
		}
	}
}

// Intel's percentages become fractions: "100 * ( x )" becomes x, anything
// else is divided by 100.
func TestPercentToFraction(t *testing.T) {
	for in, want := range map[string]string{
		"100 * ( a / ( b ) )":         "a / ( b )",
		"100 * ( a ) - ( b )":         "( 100 * ( a ) - ( b ) ) / 100",
		"100 * ( ( a ) / ( b ) )":     "( a ) / ( b )",
		"100 * ( a ) * ( 1 - ( b ) )": "( 100 * ( a ) * ( 1 - ( b ) ) ) / 100",
	} {
		if got := percentToFraction(in); got != want {
			t.Errorf("percentToFraction(%q) = %q, want %q", in, got, want)
		}
	}
}
