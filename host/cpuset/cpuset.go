// Package cpuset parses and prints the kernel's CPU list format ("0-3,8,10-11"),
// used by /sys/devices/system/cpu/online and by the cpus/cpumask files of PMUs.
// procfs keeps its parser private, so the few lines live here, once.
package cpuset

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MaxCPU bounds what a list may name, so a corrupt file cannot make us allocate
// billions of entries. Linux's NR_CPUS tops out at 8192.
const MaxCPU = 1 << 16

// Parse reads a CPU list such as "0-3,8\n" into sorted, de-duplicated CPU numbers.
// An empty list (an empty file) yields an empty, non-nil slice.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	out := []int{}
	if s == "" {
		return out, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("cpu list %q: range %d-%d is reversed", s, a, b)
			}
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

func parseCPU(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	if n >= MaxCPU {
		return 0, fmt.Errorf("CPU %d is beyond the supported maximum %d", n, MaxCPU-1)
	}
	return n, nil
}

// Format prints sorted CPU numbers in the kernel's compact form.
func Format(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&b, "%d", cpus[i])
		}
		i = j + 1
	}
	return b.String()
}

// Contains reports whether a sorted list holds cpu.
func Contains(cpus []int, cpu int) bool {
	i := sort.SearchInts(cpus, cpu)
	return i < len(cpus) && cpus[i] == cpu
}
