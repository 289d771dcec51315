package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/reference"
)

// Every command that reads a perf.data file reads each real recording in
// ../shared/recordings, the pipe-mode one included, from the file and
// from standard input alike: it ends with 0, or with 1 and a message that
// names its input, never a panic (the pipe-mode file's events are records
// in its stream, which comm once read before the stream: a nil
// dereference). A pipe-mode file is read the same from a pipe, and the two
// runs print the same; a file-mode one cannot be (its header points back
// and forth in it), and the command says so.
func TestRecordingCommandsReadEveryRecording(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(reference.Recordings(t), "perf.data.*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	for _, file := range files {
		for _, cmd := range []string{"samples", "c2c", "comm"} {
			t.Run(filepath.Base(file)+"/"+cmd, func(t *testing.T) {
				var out, errb bytes.Buffer
				code := run([]string{cmd, file}, &out, &errb)
				if code > 1 || code == 1 && !strings.Contains(errb.String(), file) {
					t.Fatalf("%s %s: exit %d\n%s", cmd, file, code, errb.String())
				}
				var inOut, inErr bytes.Buffer
				inCode := runStdin(t, file, []string{cmd, "-"}, &inOut, &inErr)
				if !strings.Contains(file, "piped") {
					if inCode != 1 || !strings.Contains(inErr.String(), "file mode read from a stream") {
						t.Errorf("%s - < %s (file mode): exit %d\n%s", cmd, file, inCode, inErr.String())
					}
					return
				}
				if inCode != code || inOut.String() != out.String() {
					t.Errorf("%s - < %s: exit %d and %d bytes, from the file %d and %d bytes\n%s", cmd, file, inCode, inOut.Len(), code, out.Len(), inErr.String())
				}
			})
		}
	}
}

// runStdin runs the command line with standard input a pipe that file is
// written into, as cat FILE | pmu_exporter ... gives it.
func runStdin(t *testing.T, file string, args []string, stdout, stderr *bytes.Buffer) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		w.Write(b) // fails once the command stops reading: it has its answer
		w.Close()
	}()
	saved := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = saved }()
	return run(args, stdout, stderr)
}
