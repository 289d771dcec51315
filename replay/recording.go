// Package replay plays a `perf stat -I` recording (CSV of -x, or JSON of -j,
// with -A per-CPU and -G cgroup columns where present) back as if it were
// being counted now: each recorded interval is folded, at its recorded
// length, into the same totals the live pipeline builds (the counting
// engine's snapshot, Top-Down slot counters per CPU and per cgroup), looping
// at the end so counters keep rising. It is for hosts without a PMU, demos
// and tests: the exporter says source="replay" wherever it serves it.
package replay

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pmu-exporter/pmu_exporter/formats/perfstat"
)

// Recording is a parsed perf stat file, split into intervals.
type Recording struct {
	Name      string
	Intervals []Interval
	// PerCPU is true for a recording made with -A: every sample names its CPU.
	PerCPU bool
	// Cgroups is true when some samples carry perf -G's cgroup column.
	Cgroups bool
	// Header holds the file's leading comment lines: where and how it was
	// recorded, or that it is synthetic.
	Header []string
	// Pods names the pods of the recording's cgroups, from "# pod" lines.
	Pods map[string]Pod
}

// Interval is one perf -I interval's samples.
type Interval struct {
	End    float64       // seconds since the recording started
	Length time.Duration // since the previous interval's end
	// Samples are in file order.
	Samples []perfstat.Sample
}

// Pod is what a "# pod UID NAMESPACE NAME [CONTAINER-ID=NAME ...]" line says,
// standing in for the Kubernetes API the recording host had.
type Pod struct {
	Namespace, Name string
	Containers      map[string]string // container ID -> name
}

// Load parses a recording. It must have intervals (-I) and, if any sample
// names a CPU, all must (-A). An error names the file and line.
func Load(name string, r io.Reader) (*Recording, error) {
	rec := &Recording{Name: name, Pods: map[string]Pod{}}
	var samples []perfstat.Sample
	leading := true // still in the file's leading comment block
	err := perfstat.ScanLines(r, func(n int, line string) error {
		return rec.comment(n, line, &leading)
	}, func(s perfstat.Sample) error {
		samples = append(samples, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("%s: no perf stat values", name)
	}
	rec.PerCPU = samples[0].CPU != ""
	prev := 0.0
	for _, s := range samples {
		if math.IsNaN(s.Time) {
			return nil, fmt.Errorf("%s: line %d: no interval time: record with perf stat -I to replay", name, s.Line)
		}
		if (s.CPU != "") != rec.PerCPU {
			return nil, fmt.Errorf("%s: line %d: some lines name a CPU (perf stat -A) and some do not", name, s.Line)
		}
		if s.CPU != "" {
			if _, err := cpuNumber(s.CPU); err != nil {
				return nil, fmt.Errorf("%s: line %d: %w", name, s.Line, err)
			}
		}
		rec.Cgroups = rec.Cgroups || s.Cgroup != ""
		n := len(rec.Intervals)
		switch {
		case n > 0 && s.Time == rec.Intervals[n-1].End:
			rec.Intervals[n-1].Samples = append(rec.Intervals[n-1].Samples, s)
			continue
		case s.Time <= prev:
			return nil, fmt.Errorf("%s: line %d: interval time %v does not follow %v", name, s.Line, s.Time, prev)
		}
		rec.Intervals = append(rec.Intervals, Interval{End: s.Time, Length: time.Duration((s.Time - prev) * 1e9), Samples: []perfstat.Sample{s}})
		prev = s.Time
	}
	return rec, nil
}

// comment keeps what line n says if it is a comment: the file's leading
// comment block (while leading), and the "# pod" lines.
func (rec *Recording) comment(n int, line string, leading *bool) error {
	if !strings.HasPrefix(line, "#") {
		*leading = false
		return nil
	}
	text := strings.TrimSpace(strings.TrimPrefix(line, "#"))
	if *leading {
		rec.Header = append(rec.Header, text)
	}
	f := strings.Fields(text)
	if len(f) == 0 || f[0] != "pod" {
		return nil
	}
	if len(f) < 4 {
		return fmt.Errorf("line %d: want \"# pod UID NAMESPACE NAME [CONTAINER-ID=NAME ...]\", got %q", n, line)
	}
	p := Pod{Namespace: f[2], Name: f[3], Containers: map[string]string{}}
	for _, c := range f[4:] {
		id, cname, ok := strings.Cut(c, "=")
		if !ok || id == "" || cname == "" {
			return fmt.Errorf("line %d: container %q is not CONTAINER-ID=NAME", n, c)
		}
		p.Containers[id] = cname
	}
	rec.Pods[f[1]] = p
	return nil
}

// cpuNumber turns perf's "CPU3" into 3.
func cpuNumber(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "CPU"))
	if err != nil || n < 0 || !strings.HasPrefix(s, "CPU") {
		return 0, fmt.Errorf("CPU %q is not CPU<n>", s)
	}
	return n, nil
}
