package replay

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

// The synthetic recording is what its generator writes.
func TestSyntheticRecordingIsGenerated(t *testing.T) {
	cmd := exec.Command("go", "run", "gen_skx.go")
	cmd.Dir = "../examples/replay"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run gen_skx.go: %v", err)
	}
	have, err := os.ReadFile("../examples/replay/skx-synthetic.csv")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, have) {
		t.Error("examples/replay/skx-synthetic.csv differs from gen_skx.go's output: regenerate it (go run gen_skx.go > skx-synthetic.csv)")
	}
}
