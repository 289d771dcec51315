// Package cgroupstat parses what a cgroup's files say of its CPU
// throttling and its pressure stalls: cpu.stat (cgroup v2, and v1's cpu
// controller, which names its times in ns) and the PSI files cpu.pressure,
// memory.pressure and io.pressure (Documentation/accounting/psi.rst), the
// same lines as /proc/pressure's. The kernel writes them, but a cgroup's
// files are where a tenant's delegated subtree lives: every line is
// checked, and an error names the line and what is wrong with it.
package cgroupstat

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CPU is cpu.stat's throttling: CFS bandwidth periods that ran, those
// throttled, and the time throttled in ns (v2's throttled_usec, v1's
// throttled_time); Usage is v2's usage_usec in ns (0 in v1, whose cpuacct
// holds it). Has says which of them the file had.
type CPU struct {
	Periods, Throttled uint64
	ThrottledNs        uint64
	UsageNs            uint64
	Has                CPUFields
}

// CPUFields says which fields a cpu.stat had.
type CPUFields uint8

// The cpu.stat fields read.
const (
	HasPeriods CPUFields = 1 << iota
	HasThrottled
	HasThrottledTime
	HasUsage
)

// ParseCPU parses a cpu.stat; keys it does not read are left alone, as
// kernels add them.
func ParseCPU(r io.Reader) (CPU, error) {
	var c CPU
	err := eachLine(r, func(n int, line string) error {
		key, value, ok := strings.Cut(line, " ")
		if !ok {
			return fmt.Errorf("cpu.stat line %d %q: not \"key value\"", n, line)
		}
		var dst *uint64
		var has CPUFields
		scale := uint64(1)
		switch key {
		case "nr_periods":
			dst, has = &c.Periods, HasPeriods
		case "nr_throttled":
			dst, has = &c.Throttled, HasThrottled
		case "throttled_usec":
			dst, has, scale = &c.ThrottledNs, HasThrottledTime, 1000
		case "throttled_time":
			dst, has = &c.ThrottledNs, HasThrottledTime
		case "usage_usec":
			dst, has, scale = &c.UsageNs, HasUsage, 1000
		default:
			return nil
		}
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return fmt.Errorf("cpu.stat line %d %q: %w", n, line, err)
		}
		if v > ^uint64(0)/scale {
			return fmt.Errorf("cpu.stat line %d %q: beyond 64 bits in ns", n, line)
		}
		*dst, c.Has = v*scale, c.Has|has
		return nil
	})
	return c, err
}

// Stall is one PSI line: the share of time stalled over the last 10, 60
// and 300 s (percent), and the total stalled time in ns (the file's µs).
type Stall struct {
	Avg10, Avg60, Avg300 float64
	TotalNs              uint64
}

// Pressure is a PSI file: "some" (at least one task stalled) and "full"
// (all non-idle tasks stalled at once), which cpu.pressure had only from
// Linux 5.13 on (HasFull).
type Pressure struct {
	Some, Full Stall
	HasFull    bool
}

// ParsePressure parses a PSI file (cpu.pressure, memory.pressure,
// io.pressure, or /proc/pressure/*): its "some" line is required.
func ParsePressure(r io.Reader) (Pressure, error) {
	var p Pressure
	hasSome := false
	err := eachLine(r, func(n int, line string) error {
		kind, rest, _ := strings.Cut(line, " ")
		var s *Stall
		switch kind {
		case "some":
			s, hasSome = &p.Some, true
		case "full":
			s, p.HasFull = &p.Full, true
		default:
			return fmt.Errorf("pressure line %d %q: neither some nor full", n, line)
		}
		var seen [4]bool
		for _, f := range strings.Fields(rest) {
			key, value, ok := strings.Cut(f, "=")
			if !ok {
				return fmt.Errorf("pressure line %d %q: %q is not key=value", n, line, f)
			}
			var err error
			switch key {
			case "avg10":
				s.Avg10, err = strconv.ParseFloat(value, 64)
				seen[0] = true
			case "avg60":
				s.Avg60, err = strconv.ParseFloat(value, 64)
				seen[1] = true
			case "avg300":
				s.Avg300, err = strconv.ParseFloat(value, 64)
				seen[2] = true
			case "total":
				var us uint64
				us, err = strconv.ParseUint(value, 10, 64)
				if err == nil && us > ^uint64(0)/1000 {
					err = fmt.Errorf("beyond 64 bits in ns")
				}
				s.TotalNs = us * 1000
				seen[3] = true
			}
			if err != nil {
				return fmt.Errorf("pressure line %d %q: %s: %w", n, line, key, err)
			}
		}
		if seen != [4]bool{true, true, true, true} {
			return fmt.Errorf("pressure line %d %q: wants avg10, avg60, avg300 and total", n, line)
		}
		return nil
	})
	if err == nil && !hasSome {
		err = fmt.Errorf("pressure: no \"some\" line")
	}
	return p, err
}

// maxLine bounds a line: the files' lines are tens of bytes.
const maxLine = 4096

// eachLine calls fn with each non-empty line and its number (from 1).
func eachLine(r io.Reader, fn func(n int, line string) error) error {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 256), maxLine)
	n := 0
	for s.Scan() {
		n++
		if line := strings.TrimSpace(s.Text()); line != "" {
			if err := fn(n, line); err != nil {
				return err
			}
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}
