package collector

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
)

// scrapedAt opens each scrape of a --replay.self file.
const scrapedAt = "# scraped at "

// selfFamily says whether a family is one of the exporter's own that only
// a live exporter makes (its cgroup attribution's eBPF programs), which a
// replay serves from --replay.self.
func selfFamily(name string) bool {
	return strings.HasPrefix(name, "pmu_self_bpf_") || name == "pmu_cgroup_switches_missed_total"
}

// replaySelf serves the exporter's own eBPF families (pmu_self_bpf_*,
// pmu_cgroup_switches_missed_total) as the recording host's exporter
// exported them: path holds two scrapes of its /metrics or more, each
// after a "# scraped at UNIX_SECONDS" line
// (internal/examplegen/self/record.sh); the first and the last are served
// (exporter.Scraped), counters rising at their rate between the two.
func (b *build) replaySelf(path string) error {
	data, err := safeopen.ReadInput("--replay.self", path, safeopen.Document, nil)
	if err != nil {
		return fmt.Errorf("--replay.self: %w", err)
	}
	scrapes, err := parseScrapes(data)
	if err != nil {
		return fmt.Errorf("--replay.self: %s: %w", path, err)
	}
	first, last := scrapes[0], scrapes[len(scrapes)-1]
	s, err := exporter.NewScraped(first.families, last.families, last.at.Sub(first.at), time.Now)
	if err != nil {
		return fmt.Errorf("--replay.self: %s: %w", path, err)
	}
	b.p.add("exporter", s)
	b.log.Info("replay: the recording host's own eBPF families", "file", path, "families", len(last.families), "span", last.at.Sub(first.at))
	return nil
}

// scrape is one scrape of a --replay.self file: its time and its
// exporter's own families (selfFamily).
type scrape struct {
	at       time.Time
	families map[string]*dto.MetricFamily
}

// parseScrapes reads a --replay.self file: two scrapes or more, each after
// its "# scraped at" line, in time order, each holding one of the
// exporter's own families at least; errors name the line.
func parseScrapes(data []byte) ([]scrape, error) {
	var out []scrape
	var body bytes.Buffer
	line, from := 0, 0
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(body.Bytes()))
		if err != nil {
			return fmt.Errorf("the scrape at line %d: %w", from, err)
		}
		s := &out[len(out)-1]
		for name, f := range fams {
			if selfFamily(name) {
				s.families[name] = f
			}
		}
		if len(s.families) == 0 {
			return fmt.Errorf("the scrape at line %d: none of the exporter's own eBPF families (pmu_self_bpf_*, pmu_cgroup_switches_missed_total): was its exporter attributing cgroups?", from)
		}
		body.Reset()
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line++
		text := sc.Text()
		rest, ok := strings.CutPrefix(text, scrapedAt)
		if !ok {
			if len(out) == 0 && strings.TrimSpace(text) != "" && !strings.HasPrefix(text, "#") {
				return nil, fmt.Errorf("line %d: a sample before the first %q line", line, strings.TrimSpace(scrapedAt))
			}
			body.WriteString(text + "\n")
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		secs, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil || secs <= 0 {
			return nil, fmt.Errorf("line %d: %q: want the scrape's time in Unix seconds", line, strings.TrimSpace(rest))
		}
		at := time.Unix(0, int64(secs*1e9))
		if len(out) > 0 && !at.After(out[len(out)-1].at) {
			return nil, fmt.Errorf("line %d: scraped at %v, not after the scrape before (%v)", line, at, out[len(out)-1].at)
		}
		out = append(out, scrape{at: at, families: map[string]*dto.MetricFamily{}})
		from = line
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("%d scrapes: want two or more (a counter's rate needs two)", len(out))
	}
	return out, nil
}
