package flagrange

import (
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
)

// Each kind of flag takes its bounds and what lies between, and refuses
// what lies outside, or is no number, naming the flag and the range; the
// default is set as any value is, so a default outside is refused too.
func TestRanges(t *testing.T) {
	var (
		i  int
		u  uint64
		f  float64
		d  time.Duration
		b  units.Base2Bytes
		bd int
	)
	app := kingpin.New("t", "")
	app.Terminate(nil)
	Int(app.Flag("lines", ""), &i, "10", 1, 100)
	Uint64(app.Flag("period", ""), &u, "1000", 10, 1<<20)
	Float64(app.Flag("budget", ""), &f, "0.01", 0.0001, 1)
	Duration(app.Flag("interval", ""), &d, "1s", 10*time.Millisecond, time.Hour)
	Bytes(app.Flag("cache", ""), &b, "32MiB", units.KiB, 16*units.GiB)
	if _, err := app.Parse(nil); err != nil || i != 10 || u != 1000 || f != 0.01 || d != time.Second || b != 32*units.MiB {
		t.Fatalf("defaults: %v, %v %v %v %v %v", err, i, u, f, d, b)
	}
	for _, c := range []struct {
		arg, refused string // refused: "" where taken
	}{
		{"--lines=1", ""}, {"--lines=100", ""}, {"--lines=0", "--lines=0: outside the range it takes, [1, 100]"},
		{"--lines=-1", "[1, 100]"}, {"--lines=101", "[1, 100]"}, {"--lines=x", "--lines=x: not a number"},
		{"--period=10", ""}, {"--period=9", "[10, 1048576]"}, {"--period=-1", "--period=-1: not a number"},
		{"--budget=1", ""}, {"--budget=0", "[0.0001, 1]"}, {"--budget=1.5", "[0.0001, 1]"}, {"--budget=NaN", "NaN lies in no range"},
		{"--interval=10ms", ""}, {"--interval=1ns", "[10ms, 1h0m0s]"}, {"--interval=-1s", "[10ms, 1h0m0s]"},
		{"--cache=1KiB", ""}, {"--cache=1B", "[1KiB, 16GiB]"}, {"--cache=17GiB", "[1KiB, 16GiB]"},
	} {
		_, err := app.Parse([]string{c.arg})
		if c.refused == "" && err != nil || c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)) {
			t.Errorf("%s: %v, want refused %q", c.arg, err, c.refused)
		}
	}
	bad := kingpin.New("t", "")
	bad.Terminate(nil)
	Int(bad.Flag("depth", ""), &bd, "0", 1, 5)
	if _, err := bad.Parse(nil); err == nil || !strings.Contains(err.Error(), "--depth=0: outside the range it takes, [1, 5]") {
		t.Errorf("a default outside its range: %v", err)
	}
}
