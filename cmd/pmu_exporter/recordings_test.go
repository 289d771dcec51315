package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/reference"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// TestSamplesOfOtherMachines: every real recording in ../shared/recordings
// (a Skylake-SP's PEBS with WEIGHT_STRUCT, a hybrid i7, an AMD's branch
// stacks, a 32-bit armv7, a pipe-mode file of perf 6.12) decodes to
// exactly the samples perf script prints of it, in its order: tid, time
// and ip, the data address and weight where the events have them, and
// each branch stack entry as -F brstack prints it. Which fields each file
// has is perf evlist's word, not ours.
func TestSamplesOfOtherMachines(t *testing.T) {
	dir := reference.Recordings(t)
	testenv.RequireTool(t, "perf")
	files, err := filepath.Glob(filepath.Join(dir, "perf.data.*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s: %v", dir, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			fields := recordedFields(t, file)
			want := perfScriptSamples(t, file, fields)
			got, said := ourRecordedSamplesSaid(t, file, fields)
			if strings.Contains(file, "armv7") && !strings.Contains(said, "decoding armv7l instructions is not supported") {
				t.Errorf("an armv7 recording, and samples did not say it reads it without decoding: %q", said)
			}
			if len(want) == 0 {
				t.Fatal("perf script printed no samples")
			}
			sameSamples(t, got, want)
			t.Logf("%d samples alike (fields %s)", len(got), strings.Join(fields, ","))
		})
	}
}

// recordedFields are the fields beyond tid, time and ip that every event
// of the file records, as perf evlist -v says: addr, weight, brstack.
func recordedFields(t *testing.T, file string) []string {
	t.Helper()
	out, err := exec.Command("perf", "evlist", "-v", "-i", file).Output()
	if err != nil {
		t.Fatalf("perf evlist -i %s: %v", file, err)
	}
	count := map[string]int{}
	lines := 0
	for _, m := range regexp.MustCompile(`\bsample_type: ([A-Z_|]+)`).FindAllSubmatch(out, -1) {
		lines++
		for _, bit := range strings.Split(string(m[1]), "|") {
			switch bit {
			case "ADDR":
				count["addr"]++
			case "WEIGHT", "WEIGHT_STRUCT":
				count["weight"]++
			case "BRANCH_STACK":
				count["brstack"]++
			}
		}
	}
	var fields []string
	for _, f := range []string{"addr", "weight", "brstack"} {
		if lines > 0 && count[f] == lines {
			fields = append(fields, f)
		}
	}
	return fields
}

// perfScriptSamples is perf script -F tid,time,ip plus fields, each sample
// as "tid time_ns ip [addr] [weight] [entry …]" (hex without 0x).
func perfScriptSamples(t *testing.T, file string, fields []string) []string {
	t.Helper()
	out, err := exec.Command("perf", "script", "-i", file, "--ns", "-G", "-F", strings.Join(append([]string{"tid", "time", "ip"}, fields...), ",")).Output()
	if err != nil {
		t.Fatalf("perf script -i %s: %v", file, err)
	}
	has := func(f string) bool { return strings.Contains(strings.Join(fields, ","), f) }
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// "tid sec.nsec: [addr] [weight] ip [from/to/flags …]"
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			t.Fatalf("perf script line %q", sc.Text())
		}
		rest := f[2:]
		var addr, weight string
		if has("addr") {
			addr, rest = rest[0], rest[1:]
		}
		if has("weight") {
			weight, rest = rest[0], rest[1:]
		}
		line := fmt.Sprintf("%s %d %s", f[0], perfTime(f[1]), rest[0])
		if has("addr") {
			line += " " + addr
		}
		if has("weight") {
			line += " " + weight
		}
		for _, e := range rest[1:] {
			line += " " + e
		}
		lines = append(lines, line)
	}
	return lines
}

// ourRecordedSamples is samples' view of the file in perfScriptSamples' form.
func ourRecordedSamples(t *testing.T, file string, fields []string) []string {
	t.Helper()
	lines, _ := ourRecordedSamplesSaid(t, file, fields)
	return lines
}

// ourRecordedSamplesSaid is ourRecordedSamples, with what samples said on
// stderr.
func ourRecordedSamplesSaid(t *testing.T, file string, fields []string) ([]string, string) {
	t.Helper()
	samples, said := samplesJSON(t, "--input", file)
	has := func(f string) bool { return strings.Contains(strings.Join(fields, ","), f) }
	var lines []string
	for _, s := range samples {
		if s.TID == nil || s.Time == nil {
			t.Fatalf("a sample without tid or time: %+v", s)
		}
		line := fmt.Sprintf("%d %d %s", *s.TID, *s.Time, strings.TrimPrefix(s.IP, "0x"))
		if has("addr") {
			line += " " + strings.TrimPrefix(s.Addr, "0x")
		}
		if has("weight") && s.Weight != nil {
			line += " " + strconv.FormatUint(*s.Weight, 10)
		}
		for _, e := range s.Brstack {
			line += " " + e.Perf
		}
		lines = append(lines, line)
	}
	return lines, said
}

// TestSamplesOfLayoutsRecordedHere: perf records here, on cpu-clock (what
// every host counts), the layouts its options make: callchains (-g), user
// stacks (--call-graph dwarf), user and interrupt registers, compressed
// (-z) and pipe-mode files, and a group read at each sample ('{…}:S');
// samples prints what perf script prints of each: the event, tid, time,
// ip and period of every sample (a group read split by member as perf
// splits it), and the registers' abi and values in perf's order.
func TestSamplesOfLayoutsRecordedHere(t *testing.T) {
	testenv.RequireRoot(t)
	perf := testenv.RequireTool(t, "perf")
	for _, c := range []struct {
		name string
		args []string
		regs string // perf script's register fields: what the options dump
	}{
		{"callchain", []string{"-e", "cpu-clock", "-g"}, ""},
		{"dwarf", []string{"-e", "cpu-clock", "--call-graph", "dwarf"}, "uregs"},
		{"registers", []string{"-e", "cpu-clock", "--intr-regs=ax,bx,ip", "--user-regs=ax,sp,ip"}, "iregs,uregs"},
		{"compressed", []string{"-e", "cpu-clock", "-z"}, ""},
		{"pipe", []string{"-e", "cpu-clock"}, ""},
		{"group read", []string{"-e", "{cpu-clock,task-clock}:S"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "perf.data")
			args := append([]string{"record", "-q", "-c", "100000"}, c.args...)
			out := file
			if c.name == "pipe" {
				out = "-"
			}
			args = append(args, "-o", out, "--", "sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done")
			cmd := exec.Command(perf, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if c.name == "pipe" {
				f, err := os.Create(file)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.Stdout = f
			}
			if err := cmd.Run(); err != nil {
				t.Fatalf("perf %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			fields := "event,tid,time,ip,period"
			if c.regs != "" {
				fields += "," + c.regs
			}
			pout, err := exec.Command(perf, "script", "-i", file, "--ns", "-G", "-F", fields).Output()
			if err != nil {
				t.Fatalf("perf script: %v", err)
			}
			var want []string
			sc := bufio.NewScanner(bytes.NewReader(pout))
			for sc.Scan() {
				// "tid sec.nsec: period event: ip [ABI:n NAME:0xV …]"
				f := strings.Fields(sc.Text())
				if len(f) < 5 {
					t.Fatalf("perf script line %q", sc.Text())
				}
				line := fmt.Sprintf("%s %s %d %s %s", strings.TrimSuffix(f[3], ":"), f[0], perfTime(f[1]), f[4], f[2])
				for _, r := range f[5:] {
					name, v, _ := strings.Cut(r, ":")
					if name == "ABI" {
						line += " abi" + v
					} else {
						line += " " + v
					}
				}
				want = append(want, line)
			}
			samples, _ := samplesJSON(t, "--input", file)
			var got []string
			stacks := 0
			for _, s := range samples {
				line := fmt.Sprintf("%s %d %d %s %d", s.Event, *s.TID, *s.Time, strings.TrimPrefix(s.IP, "0x"), *s.Period)
				for _, r := range []*regsJSON{s.IntrRegs, s.UserRegs} {
					if r != nil {
						line += fmt.Sprintf(" abi%d %s", r.ABI, strings.Join(r.Values, " "))
					}
				}
				if s.StackUserSize != nil && *s.StackUserSize > 0 {
					stacks++
				}
				got = append(got, line)
			}
			if len(want) == 0 {
				t.Fatalf("perf script printed no samples of %s", strings.Join(args, " "))
			}
			sameSamples(t, got, want)
			if c.name == "dwarf" && stacks == 0 {
				t.Errorf("--call-graph dwarf: no sample with a user stack among %d", len(got))
			}
			t.Logf("%d samples alike", len(got))
		})
	}
}

// perfTime is perf script's "sec.nsec:" time in nanoseconds.
func perfTime(field string) uint64 {
	sec, nsec, _ := strings.Cut(strings.TrimSuffix(field, ":"), ".")
	s, _ := strconv.ParseUint(sec, 10, 64)
	ns, _ := strconv.ParseUint(nsec, 10, 64)
	return s*1e9 + ns
}
