package collector

import (
	"os"
	"strings"
	"testing"
)

// The example recording parses: two scrapes 20 s apart with every one of
// the exporter's own eBPF families and nothing else.
func TestParseScrapesExample(t *testing.T) {
	data, err := os.ReadFile("../examples/replay/vm-self.prom")
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseScrapes(data)
	if err != nil {
		t.Fatal(err)
	}
	span := s[len(s)-1].at.Sub(s[0].at).Seconds()
	if len(s) != 2 || span < 19 || span > 22 {
		t.Errorf("%d scrapes %.1f s apart, want the recording's two, 20 s apart", len(s), span)
	}
	for _, name := range []string{"pmu_self_bpf_runs_total", "pmu_self_bpf_credits_total", "pmu_self_bpf_run_seconds_total", "pmu_self_bpf_stats_enabled", "pmu_cgroup_switches_missed_total"} {
		if s[1].families[name] == nil {
			t.Errorf("no %s in the last scrape", name)
		}
	}
}

// Bad files are refused with the line that is wrong.
func TestParseScrapesErrors(t *testing.T) {
	const fam = "pmu_self_bpf_credits_total 1\n"
	for text, want := range map[string]string{
		fam:                       "line 1: a sample before the first",
		"# scraped at 10\n" + fam: "1 scrapes: want two or more",
		"# scraped at 10\n" + fam + "# scraped at 9\n" + fam:                           "line 3: scraped at",
		"# scraped at ten\n" + fam:                                                     `line 1: "ten": want the scrape's time`,
		"# scraped at 10\npmu_other 1\n# scraped at 11\n" + fam:                        "the scrape at line 1: none of the exporter's own",
		"# scraped at 10\n" + fam + "# scraped at 11\npmu_self_bpf_credits_total{ 1\n": "the scrape at line 3:",
	} {
		if _, err := parseScrapes([]byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", text, err, want)
		}
	}
}

// Any file parses or is refused with an error, never a panic.
func FuzzParseScrapes(f *testing.F) {
	if data, err := os.ReadFile("../examples/replay/vm-self.prom"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("# scraped at 1\npmu_self_bpf_runs_total 1\n# scraped at 2\npmu_self_bpf_runs_total 2\n"))
	f.Add([]byte("# scraped at 1e300\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseScrapes(data)
		if err == nil && len(s) < 2 {
			t.Fatalf("%d scrapes accepted", len(s))
		}
	})
}
