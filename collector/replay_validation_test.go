package collector

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// A replay with --replay.validation serves the recording host's verdicts
// as they are in the file: passed 1 for an event whose every kernel
// passed, 0 for one that failed any, none for one never measured; each
// measured kernel's goodness; the multiplexing errors measured.
func TestReplayValidationServesTheFile(t *testing.T) {
	const file = "../examples/replay/vm-validation.json"
	var doc struct {
		Events []struct {
			Event, Kernel, Verdict string
			Goodness               float64
		}
		Samplers []struct {
			Sampler, Figure, Verdict string
			Period                   uint64
			Value                    float64
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	o := parse(t, []string{"serve", "--source=replay", "--replay.file=../replay/testdata/skx-handmade.csv", "--replay.validation=" + file})
	o.Resolve()
	p, err := replayPipeline(*o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mfs, err := NewRegistry(p, 0).Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		served[mf.GetName()] = mf
	}
	value := func(family string, labels ...string) (float64, bool) {
		for _, m := range served[family].GetMetric() {
			var have []string
			for _, l := range m.GetLabel() {
				have = append(have, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(have, ",") == strings.Join(labels, ",") {
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	wantPassed := map[string]float64{}
	for _, e := range doc.Events {
		if e.Verdict == "not_measurable" {
			if _, ok := value("pmu_event_validation_goodness", "event="+e.Event, "kernel="+e.Kernel); ok {
				t.Errorf("%s on %s was not measurable, yet has a goodness", e.Event, e.Kernel)
			}
			continue
		}
		if g, ok := value("pmu_event_validation_goodness", "event="+e.Event, "kernel="+e.Kernel); !ok || g != e.Goodness {
			t.Errorf("%s on %s: goodness %v (served %v), the file says %v", e.Event, e.Kernel, g, ok, e.Goodness)
		}
		if _, seen := wantPassed[e.Event]; !seen {
			wantPassed[e.Event] = 1
		}
		if e.Verdict == "fail" {
			wantPassed[e.Event] = 0
		}
	}
	if len(wantPassed) == 0 {
		t.Fatalf("%s measured no event", file)
	}
	for ev, want := range wantPassed {
		if got, ok := value("pmu_event_validation_passed", "event="+ev); !ok || got != want {
			t.Errorf("%s passed %v (served %v), want %v", ev, got, ok, want)
		}
	}
	if n := len(served["pmu_event_validation_passed"].GetMetric()); n != len(wantPassed) {
		t.Errorf("%d events with a verdict served, the file measured %d", n, len(wantPassed))
	}
	// The samplers' figures, each as the file has it, and each sampler
	// validated where all its figures passed.
	validated := map[string]float64{}
	for _, r := range doc.Samplers {
		if r.Verdict == "not_measurable" {
			continue
		}
		period := ""
		if r.Period != 0 {
			period = strconv.FormatUint(r.Period, 10)
		}
		if v, ok := value("pmu_sampler_validation_ratio", "figure="+r.Figure, "period="+period, "sampler="+r.Sampler); !ok || v != r.Value {
			t.Errorf("%s %s at %q: %v (served %v), the file says %v", r.Sampler, r.Figure, period, v, ok, r.Value)
		}
		if _, seen := validated[r.Sampler]; !seen {
			validated[r.Sampler] = 1
		}
		if r.Verdict == "fail" {
			validated[r.Sampler] = 0
		}
	}
	if len(validated) != 2 {
		t.Errorf("%s: samplers %v, want the page-fault and timer samplers", file, validated)
	}
	for name, want := range validated {
		if got, ok := value("pmu_sampler_validated", "sampler="+name); !ok || got != want {
			t.Errorf("sampler %s validated %v (served %v), want %v", name, got, ok, want)
		}
	}
}

// A file that is not validate's output, or has a verdict it never writes,
// is refused with the file and the entry named.
func TestReplayValidationRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ body, want string }{
		"fields":  {`{"events": [], "host": "x"}`, `unknown field "host"`},
		"empty":   {`{"events": []}`, "no events"},
		"verdict": {`{"events": [{"event": "cycles", "kernel": "loop", "verdict": "maybe"}]}`, `events[0] (cycles): verdict "maybe"`},
		"unnamed": {`{"events": [{"kernel": "loop", "verdict": "pass"}]}`, "events[0] names no event"},
		"sampler": {`{"events": [{"event": "cycles", "kernel": "loop", "verdict": "pass"}], "samplers": [{"sampler": "timer", "figure": "accuracy", "verdict": "good"}]}`, "samplers[0]"},
	} {
		path := filepath.Join(dir, name+".json")
		os.WriteFile(path, []byte(c.body), 0o644)
		o := parse(t, []string{"serve", "--source=replay", "--replay.file=../replay/testdata/skx-handmade.csv", "--replay.validation=" + path})
		o.Resolve()
		p, err := replayPipeline(*o, slog.New(slog.DiscardHandler))
		if err == nil {
			p.Close()
			t.Errorf("%s: served", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || (name != "fields" && !strings.Contains(err.Error(), path)) {
			t.Errorf("%s: %v, want it to say %q and name the file", name, err, c.want)
		}
	}
}
