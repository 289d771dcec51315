package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// recording is a perf.data file that samples, c2c or comm reads, with the
// decoder that resolves its samples to memory accesses (the code read from
// the files its MMAP2 records name).
type recording struct {
	cmd, input string // for messages: "c2c", the file's name
	stderr     io.Writer
	file       *perfdata.File
	acc        *recorded.Accesses
	closeFile  func()
}

// openRecording opens input ("-": stdin) for the subcommand cmd; an error
// has been said on stderr already.
// Code is read from the recorded paths, under symfs where it is not "".
func openRecording(cmd, input, symfs string, stdin io.Reader, stderr io.Writer) (*recording, bool) {
	r := &recording{cmd: cmd, input: input, stderr: stderr}
	file, closeFile, err := recorded.Open(input, stdin)
	if err != nil {
		r.fail(err)
		return nil, false
	}
	acc, err := recorded.NewAccesses(recorded.GoArch(file.Arch), symfs)
	if err != nil {
		closeFile()
		r.fail(err)
		return nil, false
	}
	if acc.Undecoded != nil {
		fmt.Fprintf(stderr, "pmu_exporter %s: %s: %v: samples are read without the accesses their instructions make\n", cmd, input, acc.Undecoded)
	}
	r.file, r.acc, r.closeFile = file, acc, closeFile
	return r, true
}

func (r *recording) Close() {
	r.acc.Close()
	r.closeFile()
}

// fail says what went wrong with the recording, and returns the exit status.
func (r *recording) fail(err error) int {
	fmt.Fprintf(r.stderr, "pmu_exporter %s: %s: %v\n", r.cmd, r.input, err)
	return 1
}

// eachAccess hands add every sample that resolves to a memory access, in
// time order; it returns how many samples it read, how many resolved, how
// many were malformed, and why reading stopped early.
func (r *recording) eachAccess(add func(*memaccess.Access)) (samples, accesses, bad uint64, err error) {
	samples, bad, err = recorded.EachSample(r.file, r.input, r.stderr, recorded.Visitor{
		Record: r.acc.Record,
		Sample: func(i int, s *perfrecord.Sample) error {
			if a, ok := r.acc.Access(r.file.Events.Attrs[i], s); ok {
				accesses++
				add(&a)
			}
			return nil
		},
	})
	return samples, accesses, bad, err
}

// report writes a report as indented JSON (format "json") or as text,
// then says why reading stopped early or how many samples were malformed,
// either of which makes the exit status 1: what was read is still printed.
func (r *recording) report(stdout io.Writer, format string, v any, text func(io.Writer), readErr error, bad uint64) int {
	w := bufio.NewWriter(stdout)
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	} else {
		text(w)
	}
	w.Flush()
	if readErr != nil {
		return r.fail(readErr)
	}
	if bad > 0 {
		fmt.Fprintf(r.stderr, "pmu_exporter %s: %d malformed samples skipped\n", r.cmd, bad)
		return 1
	}
	return 0
}
