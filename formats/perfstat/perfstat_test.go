package perfstat

import (
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hotplugtest"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

func parseFile(t *testing.T, name string) []Sample {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// The testdata files are what perf 6.1 printed on this project's CI VM.
func TestRecordedPerfOutputs(t *testing.T) {
	s := parseFile(t, "interval.csv")
	// First line: "     0.200364684,401.13,msec,cpu-clock,401131414,100.00,2.006,CPUs utilized"
	if len(s) != 9 || s[0].Time != 0.200364684 || s[0].Event != "cpu-clock" || s[0].Value != 401.13 || s[0].CPU != "" {
		t.Errorf("interval.csv: %+v", s)
	}
	if s[2].Event != "page-faults" || s[2].Value != 81 {
		t.Errorf("page-faults: %+v", s[2])
	}
	s = parseFile(t, "percpu.csv")
	if len(s) != 8 || s[1].CPU != "CPU1" || s[2].Event != "cycles" || !s[2].Missing() || s[2].Status != "not supported" {
		t.Errorf("percpu.csv: %+v", s)
	}
	s = parseFile(t, "total.csv")
	if len(s) != 2 || !math.IsNaN(s[0].Time) || s[0].Value != 0.74 || !s[1].Missing() {
		t.Errorf("total.csv: %+v", s)
	}
	s = parseFile(t, "percpu.json")
	if len(s) != 8 || s[0].CPU != "CPU0" || s[0].Time != 0.200298275 || s[0].Value != 200.429495 || !s[2].Missing() {
		t.Errorf("percpu.json: %+v", s)
	}
}

// cgroup.csv and cgroup.json are perf 6.1's -G output on this project's VM: a
// busy loop in cgroup replaytest on CPU 1, task-clock of the root on both.
func TestRecordedCgroupColumns(t *testing.T) {
	s := parseFile(t, "cgroup.csv")
	// "0.300463076,CPU1,303.95,msec,task-clock,replaytest,303949357,100.00,1.013,CPUs utilized"
	if len(s) != 18 || s[1].Event != "task-clock" || s[1].Cgroup != "replaytest" || s[1].Unit != "msec" ||
		s[1].Value != 303.95 || s[1].RunNS != 303949357 || s[1].Running != 100 {
		t.Errorf("cgroup.csv line 2: %+v", s[1])
	}
	if s[4].Cgroup != "/" || s[4].Event != "task-clock" || s[3].Unit != "" || s[3].Value != 2 {
		t.Errorf("cgroup.csv root and counts: %+v %+v", s[3], s[4])
	}
	if !s[0].Missing() || s[0].RunNS != 0 || s[0].Cgroup != "replaytest" {
		t.Errorf("not counted in the cgroup: %+v", s[0])
	}
	s = parseFile(t, "cgroup.json")
	if len(s) != 4 || s[1].Event != "software/config=3/" || s[1].Cgroup != "replaytest" || s[0].Unit != "msec" ||
		s[0].RunNS != 303861751 || s[0].Running != 100 || s[0].Value != 303.861701 {
		t.Errorf("cgroup.json: %+v", s)
	}
	// Without -G, the fields end at the event, and run time is still read.
	s = parseFile(t, "interval.csv")
	if s[0].Cgroup != "" || s[0].RunNS != 401131414 || s[0].Running != 100 {
		t.Errorf("interval.csv: %+v", s[0])
	}
}

func TestHandWrittenLines(t *testing.T) {
	in := `# started on Sun Nov 22 03:00:00 2026

     1.000100000,CPU0,1234,,cpu/event=0x3c,umask=0x0/,1000,100.00,,
     1.000100000,CPU0,<not counted>,,INT_MISC.UOP_DROPPING,0,0.00,,
     1.000100000,CPU0,5,,topdown-fe-bound:u,1000,50.00,,
     1.000100000,CPU0,7,,cpu/event=0x3c,umask=0x0/,kubepods.slice/pod1,1000,25.00,,
{"interval" : 2.0, "cpu": 3, "counter-value" : 42, "event" : "slots"}
{"metric-value" : 1.0, "metric-unit" : "CPUs utilized"}
`
	s, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 5 {
		t.Fatalf("%d samples: %+v", len(s), s)
	}
	if s[0].Event != "cpu/event=0x3c,umask=0x0/" || s[0].Value != 1234 || s[0].Line != 3 || s[0].Cgroup != "" {
		t.Errorf("event with commas: %+v", s[0])
	}
	if s[3].Event != "cpu/event=0x3c,umask=0x0/" || s[3].Cgroup != "kubepods.slice/pod1" || s[3].Running != 25 {
		t.Errorf("event with commas in a cgroup: %+v", s[3])
	}
	if !s[1].Missing() || s[1].Status != "not counted" {
		t.Errorf("not counted: %+v", s[1])
	}
	if s[4].CPU != "CPU3" || s[4].Value != 42 || s[4].Time != 2 || !math.IsNaN(s[4].RunNS) {
		t.Errorf("bare JSON numbers: %+v", s[4])
	}
}

func TestMalformedInputNamesTheLine(t *testing.T) {
	for in, want := range map[string]string{
		"1.0,CPU0,abc,,cycles,1,100.00,,\n":                 "line 1: counter value \"abc\" is not a number",
		"1.0,abc,,cycles,1,100.00,,\n":                      "line 1: event name \",cycles\" is malformed",
		"1,,cycles,1,100,,\n2,,cycles\n":                    "line 2:",
		"1.0,S0-D0-C0,2,1234,,cycles,1,100.00,,\n":          "aggregation \"S0-D0-C0\" is not supported",
		"{\"event\": \"x\", \"counter-value\": \"nope\"}\n": "counter value \"nope\"",
		"{broken\n":                         "line 1: not a perf stat JSON line",
		"1.0,CPU0,5,,cycles,12x,100.00,,\n": "line 1: run time \"12x\"",
		"1.0,CPU0,5,,cycles,12,101,,\n":     "line 1: percent running \"101\"",
	} {
		s, err := Parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
		if strings.HasPrefix(in, "1,,cycles,1,100") && len(s) != 1 {
			t.Errorf("the good line before the bad one was lost: %+v", s)
		}
	}
}

// TestLivePerf runs perf itself: system-wide cpu-clock per interval is the
// interval's length on every CPU.
func TestLivePerf(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	testenv.RequireRoot(t)
	for _, format := range [][]string{{"-x,"}, {"-j"}} {
		args := append(append([]string{"stat"}, format...), "-I", "100", "-A", "-a", "-e", "cpu-clock", "--", "sleep", "0.35")
		var out []byte
		var s []Sample
		// A CPU another process takes offline is "not counted" from then on.
		hotplugtest.Measure(t, func(int) {
			var err error
			if out, err = exec.Command(perf, args...).CombinedOutput(); err != nil {
				t.Fatalf("perf %v: %v\n%s", args, err, out)
			}
			if s, err = Parse(strings.NewReader(string(out))); err != nil {
				t.Fatalf("%v: %v\n%s", format, err, out)
			}
		})
		if len(s) < 3*runtime.NumCPU() {
			t.Fatalf("%v: %d samples:\n%s", format, len(s), out)
		}
		// cpu-clock in msec, idle included: on each CPU, what the intervals
		// after the first counted adds up to the time between the first
		// and the last timestamp. Single intervals are not compared: perf
		// reads and stamps each one late by however long it waited for a
		// CPU, which on a busy machine is a good part of 100 ms.
		sum := map[string]float64{}
		first, last := s[0].Time, s[len(s)-1].Time
		for _, x := range s {
			if x.CPU == "" || x.Event != "cpu-clock" {
				t.Errorf("%v: %+v", format, x)
			}
			if x.Time > first {
				sum[x.CPU] += x.Value
			}
		}
		for cpu, v := range sum {
			if want := (last - first) * 1000; math.Abs(v-want) > want*0.1 {
				t.Errorf("%v: %s cpu-clock %v msec in %v msec", format, cpu, v, want)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"interval.csv", "percpu.csv", "total.csv", "percpu.json", "cgroup.csv", "cgroup.json"} {
		b, _ := os.ReadFile("testdata/" + name)
		f.Add(string(b))
	}
	f.Add("1.0,CPU0,<not counted>,,x,0,0,,\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, _ := Parse(strings.NewReader(in))
		for _, x := range s {
			if x.Event == "" {
				t.Fatalf("sample without event: %+v", x)
			}
		}
	})
}

// A line too long for any perf output is an error naming it, after the
// samples before it.
func TestLongLine(t *testing.T) {
	in := "1.0,1,,cycles,100,100.00,,\n" + strings.Repeat("x", 2<<20) + "\n"
	s, err := Parse(strings.NewReader(in))
	if err == nil || err.Error() != "line 2: longer than 1 MiB, which no line of perf stat output is" || len(s) != 1 {
		t.Errorf("%d samples, %v", len(s), err)
	}
}
