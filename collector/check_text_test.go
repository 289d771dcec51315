package collector

import (
	"bytes"
	"strings"
	"testing"
)

// What each read adds is said as a cost; a count that fell with more
// reads is said as the machine's noise, never as a negative cost
// (issue 57: "minor-faults -71.61").
func TestSelfPerturbationText(t *testing.T) {
	var b bytes.Buffer
	writeSelf(&b, selfStatus{CPU: 1, NullReadMedian: 2e-6, PerExtraRead: map[string]float64{
		"context-switches": 7.5, "minor-faults": -71.61, "page-faults": 0,
	}, ReaderSwitches: 1.9})
	out := b.String()
	for _, want := range []string{"adds to that CPU's counts: context-switches +7.50, page-faults +0.00 (the reader itself",
		"minor-faults: fewer with more reads, the machine's other work"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "-71") {
		t.Errorf("a negative cost printed:\n%s", out)
	}
}
