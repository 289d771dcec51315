package pmu

import (
	"fmt"
	"strconv"
	"strings"
)

// Format says where a term's bits go: which config word (0 for config, 1 for
// config1, 2 for config2, 3 for config3) and which bit ranges, lowest first.
// "config:0-7,32-35" puts a value's low 8 bits at 0-7 and the next 4 at 32-35.
type Format struct {
	Word   int
	Ranges []BitRange
}

// BitRange is an inclusive range of bit positions.
type BitRange struct{ Lo, Hi uint }

// Width is the number of value bits the format holds.
func (f Format) Width() uint {
	var w uint
	for _, r := range f.Ranges {
		w += r.Hi - r.Lo + 1
	}
	return w
}

// ParseFormat reads a format file's content, e.g. "config:0-7,32-35" or "config1:0".
func ParseFormat(s string) (Format, error) {
	word, ranges, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Format{}, fmt.Errorf("format %q has no ':'", s)
	}
	var f Format
	switch word {
	case "config":
		f.Word = 0
	case "config1":
		f.Word = 1
	case "config2":
		f.Word = 2
	case "config3":
		f.Word = 3
	default:
		return Format{}, fmt.Errorf("format %q names unknown word %q", s, word)
	}
	for _, part := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 8)
		if err != nil || a > 63 {
			return Format{}, fmt.Errorf("format %q: bad bit %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 8); err != nil || b > 63 || b < a {
				return Format{}, fmt.Errorf("format %q: bad bit range %q", s, part)
			}
		}
		f.Ranges = append(f.Ranges, BitRange{uint(a), uint(b)})
	}
	return f, nil
}

// Encode places value into the format's bits and returns the bits to OR into the
// config word. A value wider than the format is an error, never silently cut.
func (f Format) Encode(value uint64) (uint64, error) {
	if w := f.Width(); w < 64 && value>>w != 0 {
		return 0, fmt.Errorf("value %#x does not fit in %d bits (%s)", value, w, f)
	}
	var out uint64
	for _, r := range f.Ranges {
		n := r.Hi - r.Lo + 1
		mask := uint64(1)<<n - 1
		if n == 64 {
			mask = ^uint64(0)
		}
		out |= (value & mask) << r.Lo
		value >>= n % 64
		if n == 64 {
			value = 0
		}
	}
	return out, nil
}

func (f Format) String() string {
	var b strings.Builder
	b.WriteString("config")
	if f.Word > 0 {
		fmt.Fprintf(&b, "%d", f.Word)
	}
	b.WriteByte(':')
	for i, r := range f.Ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		if r.Lo == r.Hi {
			fmt.Fprintf(&b, "%d", r.Lo)
		} else {
			fmt.Fprintf(&b, "%d-%d", r.Lo, r.Hi)
		}
	}
	return b.String()
}
