package cgroupstat

import (
	"strings"
	"testing"
)

// A v2 cpu.stat as Linux 6.18 writes it (with a cpu controller), and a v1
// cpu controller's, which names its times in ns: both give the same
// throttling by hand (5 periods of 10 throttled, for 1.5 ms).
func TestParseCPU(t *testing.T) {
	v2 := "usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\nnr_periods 10\nnr_throttled 5\nthrottled_usec 1500\nnr_bursts 0\nburst_usec 0\n"
	v1 := "nr_periods 10\nnr_throttled 5\nthrottled_time 1500000\nnr_bursts 0\nburst_time 0\n"
	for name, c := range map[string]struct {
		text string
		want CPU
	}{
		"v2": {v2, CPU{Periods: 10, Throttled: 5, ThrottledNs: 1_500_000, UsageNs: 123_456_000, Has: HasPeriods | HasThrottled | HasThrottledTime | HasUsage}},
		"v1": {v1, CPU{Periods: 10, Throttled: 5, ThrottledNs: 1_500_000, Has: HasPeriods | HasThrottled | HasThrottledTime}},
		// v2 without the cpu controller: usage alone.
		"usage": {"usage_usec 7\nuser_usec 5\nsystem_usec 2\n", CPU{UsageNs: 7000, Has: HasUsage}},
	} {
		got, err := ParseCPU(strings.NewReader(c.text))
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, c.want)
		}
	}
}

// PSI as the kernel writes it: the µs totals in ns, the averages as given;
// cpu.pressure before 5.13 has no full line.
func TestParsePressure(t *testing.T) {
	p, err := ParsePressure(strings.NewReader("some avg10=1.85 avg60=11.09 avg300=19.60 total=2383562560\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	want := Pressure{Some: Stall{Avg10: 1.85, Avg60: 11.09, Avg300: 19.60, TotalNs: 2_383_562_560_000}, HasFull: true}
	if err != nil || p != want {
		t.Errorf("%+v, %v; want %+v", p, err, want)
	}
	p, err = ParsePressure(strings.NewReader("some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n"))
	if err != nil || p.HasFull || p.Some.TotalNs != 12_000 {
		t.Errorf("no full line: %+v, %v", p, err)
	}
}

// Bad files are refused, naming the line and what is wrong.
func TestBadFiles(t *testing.T) {
	for _, c := range []struct {
		pressure bool
		text     string
		want     string
	}{
		{false, "nr_periods ten\n", `line 1 "nr_periods ten"`},
		{false, "nr_periods\n", "not \"key value\""},
		{false, "usage_usec 18446744073709551615\n", "beyond 64 bits"},
		{true, "", `no "some" line`},
		{true, "some avg10=1 avg60=1 total=5\n", "wants avg10, avg60, avg300 and total"},
		{true, "half avg10=1\n", "neither some nor full"},
		{true, "some avg10=x avg60=1 avg300=1 total=5\n", "avg10"},
		{true, "some avg10=1 avg60=1 avg300=1 total\n", "not key=value"},
		{true, "some " + strings.Repeat("x", 5000), "token too long"},
	} {
		var err error
		if c.pressure {
			_, err = ParsePressure(strings.NewReader(c.text))
		} else {
			_, err = ParseCPU(strings.NewReader(c.text))
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: %v, want an error with %q", c.text, err, c.want)
		}
	}
}

// FuzzParse: no input makes either parser panic, and what one accepts
// keeps its invariants (totals in whole µs where the file gave µs).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"some avg10=1.85 avg60=11.09 avg300=19.60 total=2383562560\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"usage_usec 123456\nnr_periods 10\nnr_throttled 5\nthrottled_usec 1500\n",
		"nr_periods 10\nnr_throttled 5\nthrottled_time 1500000\n",
		"some avg10=1 avg60=1 avg300=1 total=18446744073709551\n",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParsePressure(strings.NewReader(s)); err == nil && (p.Some.TotalNs%1000 != 0 || p.Full.TotalNs%1000 != 0) {
			t.Errorf("%q: totals %d and %d ns, not whole µs", s, p.Some.TotalNs, p.Full.TotalNs)
		}
		if c, err := ParseCPU(strings.NewReader(s)); err == nil && c.UsageNs%1000 != 0 {
			t.Errorf("%q: usage %d ns, not whole µs", s, c.UsageNs)
		}
	})
}
