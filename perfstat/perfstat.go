// Package perfstat reads what `perf stat` prints for machines: the CSV of
// `perf stat -x,` (with or without -I intervals and -A per-CPU columns) and the
// JSON lines of `perf stat -j`, so measurements recorded on any machine can be
// fed to the Top-Down engine. Values perf could not count (<not counted>,
// <not supported>) are kept as missing, never as zero.
package perfstat

import (
	"bufio"
	"encoding/json"
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
	// Value is NaN when perf could not count the event; Status then says why.
	Value  float64
	Status string
	Line   int
}

// Missing reports whether perf had no value for the sample.
func (s Sample) Missing() bool { return math.IsNaN(s.Value) }

// Parse reads CSV or JSON-lines output, detected per line. Comment lines (#),
// blank lines and perf's own notes are skipped; a malformed line is an error
// naming its number, and the samples before it are returned too.
func Parse(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
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
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		s.Line = n
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
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
	s.Value, s.Status = v, status
	s.Event = strings.TrimSpace(strings.Join(f[i+2:len(f)-4], ","))
	if s.Event == "" || strings.HasPrefix(s.Event, ",") || strings.HasSuffix(s.Event, ",") {
		return s, fmt.Errorf("event name %q is malformed", s.Event)
	}
	return s, nil
}

type jsonLine struct {
	Interval     *float64        `json:"interval"`
	CPU          json.RawMessage `json:"cpu"`
	CounterValue json.RawMessage `json:"counter-value"`
	Event        string          `json:"event"`
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
	s.Value, s.Status, s.Event = v, status, j.Event
	return s, nil
}
