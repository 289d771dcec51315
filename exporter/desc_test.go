package exporter

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every metric descriptor of the project is built by desc: no other
// non-test file calls prometheus.NewDesc, so a metric's name is made in one
// place, pmu_ prefix and all.
func TestOneDescriptorIdiom(t *testing.T) {
	var callers []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := strings.Count(string(b), "prometheus.NewDesc("); n > 0 {
			callers = append(callers, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(callers) != 1 || callers[0] != filepath.Join("..", "exporter", "exporter.go") {
		t.Errorf("prometheus.NewDesc is called in %v; only desc (exporter/exporter.go) may", callers)
	}
}
