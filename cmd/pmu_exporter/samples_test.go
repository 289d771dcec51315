package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// perfScriptFields are what perf script and samples both print, in perf
// script's column order.
const perfScriptFields = "pid,tid,cpu,time,period,addr,data_src,weight,ip,phys_addr"

// recordFaults records every page fault on this machine while a few
// processes run, with addresses, data sources, weights, physical addresses
// and page sizes: perf record -e page-faults -d as the issue names it.
func recordFaults(t *testing.T, pipe bool, extra ...string) string {
	t.Helper()
	testenv.RequireRoot(t)
	perf := testenv.RequireTool(t, "perf")
	out := filepath.Join(t.TempDir(), "perf.data")
	args := append([]string{"record", "-q", "-a", "-e", "page-faults", "-c", "1", "-d", "--phys-data", "-W", "--data-page-size"}, extra...)
	args = append(args, "-o", out)
	if pipe {
		args[len(args)-1] = "-"
	}
	args = append(args, "--", "sh", "-c", "for i in 1 2 3 4; do cat /proc/self/maps >/dev/null & done; wait")
	// perf record -a opens each CPU it lists as online: one that another
	// process takes offline between the list and the open fails it
	// (ENODEV), and one offline for part of the run loses its faults.
	var err error
	var stderr bytes.Buffer
	hotplugtest.Measure(t, func(int) {
		cmd := exec.Command(perf, args...)
		stderr.Reset()
		cmd.Stderr = &stderr
		if pipe {
			f, ferr := os.Create(out)
			if ferr != nil {
				t.Fatal(ferr)
			}
			defer f.Close()
			cmd.Stdout = f
		}
		err = cmd.Run()
	})
	if err != nil {
		t.Fatalf("perf %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// perfScript is perf script's view of the file: one line per sample, the
// fields normalised to "pid tid cpu time_ns period addr data_src weight ip
// phys" in hex where perf prints hex.
func perfScript(t *testing.T, file string) []string {
	t.Helper()
	return perfScriptOf(t, file, "-F", perfScriptFields)
}

// perfScriptOf is perfScript with other arguments (--itrace, fields by
// event type).
func perfScriptOf(t *testing.T, file string, args ...string) []string {
	t.Helper()
	out, err := exec.Command("perf", append([]string{"script", "-i", file, "--ns"}, args...)...).Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		// "pid/tid [cpu] sec.nsec: period addr datasrc |OP ...|BLK  N/A weight ip phys"
		bar, last := strings.IndexByte(line, '|'), strings.LastIndexByte(line, '|')
		if bar < 0 {
			t.Fatalf("perf script line without data_src: %q", line)
		}
		head, tail := strings.Fields(strings.NewReplacer("/", " ", "[", "", "]", "", ":", "").Replace(line[:bar])), strings.Fields(line[last+1:])
		if len(head) != 7 || len(tail) < 3 {
			t.Fatalf("perf script line %q: %d fields before data_src, %d after", line, len(head), len(tail))
		}
		sec, nsec, _ := strings.Cut(head[3], ".")
		s, _ := strconv.ParseUint(sec, 10, 64)
		ns, _ := strconv.ParseUint(nsec, 10, 64)
		tail = tail[len(tail)-3:]
		cpu, _ := strconv.Atoi(head[2])
		lines = append(lines, fmt.Sprintf("%s %s %d %d %s 0x%s 0x%s %s 0x%s 0x%s", head[0], head[1], cpu, s*1e9+ns,
			head[4], head[5], head[6], tail[0], tail[1], tail[2]))
	}
	return lines
}

// ourSamples runs `pmu_exporter samples` and normalises its lines the same way.
func ourSamples(t *testing.T, file string) []string {
	t.Helper()
	samples, _ := samplesJSON(t, "--input", file)
	var lines []string
	for _, s := range samples {
		if s.PID == nil || s.CPU == nil || s.Time == nil || s.Period == nil || s.Weight == nil || s.DataSrc == nil {
			t.Fatalf("sample without a recorded field: %+v", s)
		}
		lines = append(lines, fmt.Sprintf("%d %d %d %d %d %s %s %d %s %s", *s.PID, *s.TID, *s.CPU, *s.Time, *s.Period,
			s.Addr, s.DataSrc.Raw, *s.Weight, s.IP, s.PhysAddr))
	}
	return lines
}

// sameSamples requires samples' lines to be perf script's, in its order.
func sameSamples(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d samples, perf script has %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("sample %d:\n ours %s\n perf %s", i, got[i], want[i])
		}
	}
}

// TestSamplesAgreeWithPerfScript: on files perf recorded here, in file and
// pipe mode, samples prints exactly perf script's samples, in its order.
func TestSamplesAgreeWithPerfScript(t *testing.T) {
	for _, pipe := range []bool{false, true} {
		t.Run(map[bool]string{false: "file", true: "pipe"}[pipe], func(t *testing.T) {
			file := recordFaults(t, pipe)
			want, got := perfScript(t, file), ourSamples(t, file)
			if len(want) < 50 {
				t.Fatalf("perf recorded only %d page faults", len(want))
			}
			sameSamples(t, got, want)
			if pipe { // as a stream on standard input, the same lines
				fromFile, err := exec.Command(binary, "samples", "-i", file).Output()
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(binary, "samples", "-i", "-")
				f, err := os.Open(file)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.Stdin = struct{ io.Reader }{f} // a pipe-like reader, not a file
				fromStdin, err := cmd.Output()
				if err != nil || !bytes.Equal(fromStdin, fromFile) {
					t.Errorf("samples -i - differs from samples -i FILE (%v)", err)
				}
			}
		})
	}
}

// On a perf c2c recording of PEBS samples, each line carries the weight
// and the decoded data source the recording was made with: the loads hit
// modified lines in L3 (local HITM), the stores hit L1.
func TestSamplesDecodeDataSource(t *testing.T) {
	path, loads, stores := c2cRecording(t, 0.5)
	samples, _ := samplesJSON(t, path)
	var hitm, l1 int
	for _, s := range samples {
		d := s.DataSrc
		switch {
		case s.Event == "cpu/mem-loads,ldlat=30/P" && d.Source == "l3" && d.HITM == "local" && d.Snoop == "hitm" &&
			*s.Weight == 120 && d.Op[0] == "load" && d.LvlNum == "l3":
			hitm++
		case s.Event == "cpu/mem-stores/P" && d.Source == "l1" && d.HITM == "none" && d.Op[0] == "store":
			l1++
		default:
			t.Fatalf("unexpected sample %+v %+v", s, *d)
		}
	}
	if hitm != loads || l1 != stores {
		t.Errorf("%d L3 HITM loads and %d L1 stores, the recording has %d and %d", hitm, l1, loads, stores)
	}
}

// perf record -z compresses the records it reads from the rings (zstd):
// samples still prints exactly perf script's samples, in file and pipe
// mode.
func TestSamplesOfCompressedRecording(t *testing.T) {
	for _, pipe := range []bool{false, true} {
		t.Run(map[bool]string{false: "file", true: "pipe"}[pipe], func(t *testing.T) {
			file := recordFaults(t, pipe, "-z")
			header, err := exec.Command("perf", "report", "--header-only", "-i", file).Output()
			if err != nil || !strings.Contains(string(header), "# compressed : Zstd") {
				t.Fatalf("perf report --header-only does not say the file is compressed (%v):\n%s", err, header)
			}
			want, got := perfScript(t, file), ourSamples(t, file)
			if len(want) < 50 {
				t.Fatalf("perf recorded only %d page faults", len(want))
			}
			sameSamples(t, got, want)
		})
	}
}
