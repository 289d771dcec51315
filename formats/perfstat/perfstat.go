// Package perfstat reads what `perf stat` prints for machines: the CSV of
// `perf stat -x,` (with or without -I intervals and -A per-CPU columns) and the
// JSON lines of `perf stat -j`, so measurements recorded on any machine can be
// fed to the Top-Down engine. Values perf could not count (<not counted>,
// <not supported>) are kept as missing, never as zero.
package perfstat

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Sample is one counter value.
type Sample struct {
	// Time is the interval's end in seconds since start; NaN without -I.
	Time float64
	// CPU is "CPU3" with -A, "" for the whole system (or process).
	CPU   string
	Event string
	// Unit is perf's unit of Value ("msec" for the clocks, "" for counts).
	Unit string
	// Cgroup is the cgroup the event counted in (perf stat -G), "" without.
	Cgroup string
	// Value is NaN when perf could not count the event; Status then says why.
	Value  float64
	Status string
	// RunNS is the time the event held a counter in the interval, in ns, and
	// Running the percentage of its enabled time that was (NaN where perf
	// printed none): perf has already scaled Value by their ratio.
	RunNS   float64
	Running float64
	Line    int
}

// Missing reports whether perf had no value for the sample.
func (s Sample) Missing() bool { return math.IsNaN(s.Value) }

// Parse reads CSV or JSON-lines output, detected per line. Comment lines (#),
// blank lines and perf's own notes are skipped; a malformed line is an error
// naming its number, and the samples before it are returned too.
func Parse(r io.Reader) ([]Sample, error) {
	var out []Sample
	err := Scan(r, func(s Sample) error {
		out = append(out, s)
		return nil
	})
	return out, err
}

// Scan reads as Parse does, handing each sample to fn as its line is read,
// so that a recording of any length is read in the memory of one line; an
// error from fn stops it and is returned.
func Scan(r io.Reader, fn func(Sample) error) error {
	return ScanLines(r, nil, fn)
}

// ScanLines is Scan that also hands each line that is not blank to onLine,
// numbered and trimmed, before it is parsed (a comment is handed on
// only there): for a reader of what the comments say, in the same pass.
func ScanLines(r io.Reader, onLine func(n int, text string) error, fn func(Sample) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if onLine != nil {
			if err := onLine(n, line); err != nil {
				return err
			}
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		var s Sample
		var err error
		if strings.HasPrefix(line, "{") {
			s, err = parseJSON(line)
		} else {
			s, err = parseCSV(line)
		}
		if err == errSkip {
			continue
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		s.Line = n
		if err := fn(s); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than 1 MiB, which no line of perf stat output is", n+1)
		}
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}

var errSkip = fmt.Errorf("skip")

// aggregation matches perf's --per-socket/--per-die/--per-core/--per-node ids.
var aggregation = regexp.MustCompile(`^(S\d+(-D\d+)?(-[CL]\d+)?|N\d+)$`)

// value parses a counter value, or perf's markers for none.
func value(s string) (float64, string, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "<") && strings.HasSuffix(s, ">") {
		return math.NaN(), strings.Trim(s, "<>"), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, "", fmt.Errorf("counter value %q is not a number", s)
	}
	return v, "", nil
}

func isValue(s string) bool {
	_, _, err := value(s)
	return err == nil
}

// parseCSV reads [time,][CPUn,]value,unit,event,runtime,pcnt,metric,metric-unit.
// The last four fields are fixed, so an event name containing commas
// (cpu/event=0x3c,umask=0x0/) is whatever lies between unit and them.
func parseCSV(line string) (Sample, error) {
	f := strings.Split(line, ",")
	s := Sample{Time: math.NaN()}
	i := 0
	if len(f) > 1 && isValue(f[0]) && (isValue(f[1]) || strings.HasPrefix(f[1], "CPU") || aggregation.MatchString(f[1])) {
		t, err := strconv.ParseFloat(strings.TrimSpace(f[0]), 64)
		if err != nil {
			return s, fmt.Errorf("interval time %q is not a number", f[0])
		}
		s.Time, i = t, 1
	}
	if i < len(f) && strings.HasPrefix(f[i], "CPU") {
		s.CPU, i = f[i], i+1
	} else if i < len(f) && aggregation.MatchString(f[i]) {
		return s, fmt.Errorf("aggregation %q is not supported; record with -A (per CPU) or without aggregation", f[i])
	}
	// value, unit, event..., runtime, pcnt, metric value, metric unit
	if len(f)-i < 7 {
		if len(f)-i >= 3 && !isValue(f[i]) {
			return s, errSkip // perf's notes ("Some events weren't counted...")
		}
		return s, fmt.Errorf("%d fields, want at least 7 (value,unit,event,run time,%% running,metric,unit)", len(f)-i)
	}
	v, status, err := value(f[i])
	if err != nil {
		return s, err
	}
	s.Value, s.Status, s.Unit = v, status, strings.TrimSpace(f[i+1])
	names := f[i+2 : len(f)-4]
	if n := len(names); n > 1 && strings.TrimSpace(strings.Join(names[:n-1], ",")) != "" && cgroupField(names[:n-1], names[n-1]) {
		s.Cgroup, names = strings.TrimSpace(names[n-1]), names[:n-1]
	}
	s.Event = strings.TrimSpace(strings.Join(names, ","))
	if s.Event == "" || strings.HasPrefix(s.Event, ",") || strings.HasSuffix(s.Event, ",") {
		return s, fmt.Errorf("event name %q is malformed", s.Event)
	}
	if s.RunNS, s.Running, err = runTime(f[len(f)-4], f[len(f)-3]); err != nil {
		return s, err
	}
	return s, nil
}

// cgroupField reports whether the last of the fields between unit and run time
// is perf -G's cgroup column rather than part of an event spec with commas
// (cpu/event=0x3c,umask=0x0/): the spec before it has balanced slashes and
// the field is no term=value.
func cgroupField(event []string, last string) bool {
	return strings.Count(strings.Join(event, ","), "/")%2 == 0 && !strings.Contains(last, "=")
}

// runTime parses perf's run-time (ns) and percent-running columns.
func runTime(run, pcnt string) (float64, float64, error) {
	r, p := math.NaN(), math.NaN()
	if run = strings.TrimSpace(run); run != "" {
		v, err := strconv.ParseFloat(run, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) {
			return r, p, fmt.Errorf("run time %q is not a number of nanoseconds", run)
		}
		r = v
	}
	if pcnt = strings.TrimSpace(pcnt); pcnt != "" {
		v, err := strconv.ParseFloat(pcnt, 64)
		if err != nil || v < 0 || v > 100 {
			return r, p, fmt.Errorf("percent running %q is not between 0 and 100", pcnt)
		}
		p = v
	}
	return r, p, nil
}

type jsonLine struct {
	Interval     *float64        `json:"interval"`
	CPU          json.RawMessage `json:"cpu"`
	CounterValue json.RawMessage `json:"counter-value"`
	Event        string          `json:"event"`
	Unit         string          `json:"unit"`
	Cgroup       string          `json:"cgroup"`
	Runtime      *float64        `json:"event-runtime"`
	Running      *float64        `json:"pcnt-running"`
}

func parseJSON(line string) (Sample, error) {
	var j jsonLine
	s := Sample{Time: math.NaN()}
	if err := json.Unmarshal([]byte(line), &j); err != nil {
		return s, fmt.Errorf("not a perf stat JSON line: %w", err)
	}
	if j.Event == "" {
		return s, errSkip // metric-only lines
	}
	if j.Interval != nil {
		s.Time = *j.Interval
	}
	if len(j.CPU) > 0 {
		var c string
		if json.Unmarshal(j.CPU, &c) != nil {
			c = string(j.CPU) // some perf versions print the number bare
		}
		s.CPU = "CPU" + strings.TrimPrefix(c, "CPU")
	}
	var raw string
	if json.Unmarshal(j.CounterValue, &raw) != nil {
		raw = string(j.CounterValue)
	}
	v, status, err := value(raw)
	if err != nil {
		return s, err
	}
	s.Value, s.Status, s.Event, s.Unit, s.Cgroup = v, status, j.Event, j.Unit, j.Cgroup
	s.RunNS, s.Running = math.NaN(), math.NaN()
	if j.Runtime != nil {
		s.RunNS = *j.Runtime
	}
	if j.Running != nil {
		s.Running = *j.Running
	}
	if s.RunNS < 0 || s.Running < 0 || s.Running > 100 {
		return s, fmt.Errorf("event-runtime %v or pcnt-running %v out of range", s.RunNS, s.Running)
	}
	return s, nil
}
