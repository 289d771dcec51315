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

// The synthetic examples are what their generators write.
func TestSyntheticExamplesAreGenerated(t *testing.T) {
	for gen, file := range map[string]string{"gen_skx.go": "skx-synthetic.csv", "gen_c2c.go": "skx-c2c.data"} {
		cmd := exec.Command("go", "run", gen)
		cmd.Dir = "../examples/replay"
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go run %s: %v", gen, err)
		}
		have, err := os.ReadFile("../examples/replay/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, have) {
			t.Errorf("examples/replay/%s differs from %s's output: regenerate it (go run %s > %s)", file, gen, gen, file)
		}
	}
}
