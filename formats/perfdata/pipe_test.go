package perfdata

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// A pipe-mode stream's events and features are records before its data
// (perf 6.12's pipe-mode recording in ../shared/recordings): Open reads up
// to the first data record, so Events, Names and the arch are known when
// it returns, as a file's header gives them, and Next still returns that
// record first: the records read from the stream and from the file
// opened whole are the same, in the same order.
func TestPipeModeEventsKnownAtOpen(t *testing.T) {
	name := filepath.Join(reference.Recordings(t), "perf.data.piped.header_features_aligned-6.12")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	records := func(r io.Reader) (f *File, recs [][]byte) {
		f, err := Open(r)
		if err != nil {
			t.Fatal(err)
		}
		if f.Events == nil || len(f.Names) == 0 || f.Arch == "" || !f.Pipe {
			t.Fatalf("after Open: events %v, names %v, arch %q, pipe %v", f.Events, f.Names, f.Arch, f.Pipe)
		}
		for {
			rec, err := f.Next()
			if err == io.EOF {
				return f, recs
			}
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, bytes.Clone(rec))
		}
	}
	file, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	_, fromFile := records(file)
	f, fromStream := records(bytes.NewReader(b))
	if len(fromFile) == 0 || len(fromFile) != len(fromStream) {
		t.Fatalf("%d records from the file, %d from the stream", len(fromFile), len(fromStream))
	}
	for i := range fromFile {
		if !bytes.Equal(fromFile[i], fromStream[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
	t.Logf("%d records of %v (%s)", len(fromStream), f.Names, f.Arch)
}
