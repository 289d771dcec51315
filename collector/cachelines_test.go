package collector

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/internal/perffile"
)

// Serving the Arm SPE example (examples/replay/n1-spe.data): the memory
// samples' loads from peer caches carry snoop="peer", and
// /debug/cachelines?display= ranks as c2c -d does: by peer snoops the
// benchmark's two lines, slots' line first; by HITM none (Arm has no
// HITM); an unknown display is a 400 naming the choices.
func TestReplaySPECachelines(t *testing.T) {
	p, mfs := replayOf(t, "../examples/replay/n1-spe.data")
	var b bytes.Buffer
	for _, mf := range mfs {
		if mf.GetName() == "pmu_mem_samples_total" {
			expfmt.MetricFamilyToText(&b, mf)
		}
	}
	if !strings.Contains(b.String(), `pmu_mem_samples_total{op="load",snoop="peer",source="peer_cache"}`) {
		t.Errorf("no peer loads in:\n%s", b.String())
	}
	var lines http.Handler
	for _, h := range p.Handlers() {
		if h.Path == "/debug/cachelines" {
			lines = h.Handler
		}
	}
	if lines == nil {
		t.Fatal("no /debug/cachelines")
	}
	get := func(query string) (int, cacheline.Report, string) {
		w := httptest.NewRecorder()
		lines.ServeHTTP(w, httptest.NewRequest("GET", "/debug/cachelines?"+query, nil))
		var r cacheline.Report
		if w.Code == 200 {
			if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		}
		return w.Code, r, w.Body.String()
	}
	if code, r, _ := get("display=peer"); code != 200 || len(r.Lines) != 2 || r.Lines[0].Address != "0x555500000100" || r.Lines[0].LocalPeer == 0 {
		t.Errorf("display=peer: %d %+v", code, r.Lines)
	}
	if code, r, _ := get("display=tot&n=5"); code != 200 || len(r.Lines) != 0 || r.Totals.LocalPeer == 0 {
		t.Errorf("display=tot: %d, %d lines, totals %+v", code, len(r.Lines), r.Totals)
	}
	if code, _, body := get("display=hitm"); code != 400 || !strings.Contains(body, "peer") {
		t.Errorf("display=hitm: %d %s", code, body)
	}
}

// Replaying an Arm SPE recording serves what live sampling counts of its
// AUX event: the AUX records' losses by flag (PERF_AUX_FLAG_TRUNCATED 1,
// PARTIAL 4, COLLISION 8, set by hand on five chunks below) and the records
// of operations that are neither loads nor stores (one branch a chunk),
// beside the memory event's samples (one load a chunk).
func TestReplaySPEAuxLosses(t *testing.T) {
	ops := perffile.SPEPackets(perffile.SPEOp{PC: 0x400000, Virtual: 0x1000, Source: 0xe, Context: 4242, Timestamp: 5},
		perffile.SPEOp{PC: 0x400010, Branch: true, Context: 4242, Timestamp: 6})
	s := perffile.SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: 4242, Comm: "x", Threads: []uint32{4242}, CPUs: 2, Mult: 1, Zero: 1000,
		Traces: []perffile.SPETrace{{CPU: 0, Data: ops, AuxFlags: 1}, {CPU: 1, Data: ops, AuxFlags: 4}, {CPU: 0, Data: ops, AuxFlags: 1 | 8}, {CPU: 1, Data: ops}, {CPU: 0, Data: ops}}}
	file := filepath.Join(t.TempDir(), "aux.data")
	if err := os.WriteFile(file, s.File(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, mfs := replayOf(t, file)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" || l.GetName() == "event" {
					key += " " + l.GetValue()
				}
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	spe := "arm_spe_0/ts_enable=1,pa_enable=1/" // as perffile names it
	want := map[string]float64{
		"pmu_sampling_aux_lost_total " + spe + " truncated": 2,
		"pmu_sampling_aux_lost_total " + spe + " partial":   1,
		"pmu_sampling_aux_lost_total " + spe + " collision": 1,
		"pmu_sampling_filtered_total " + spe:                5,
		"pmu_sampling_samples_total memory":                 5,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if t.Failed() {
		for k, v := range got {
			if strings.HasPrefix(k, "pmu_sampling_") {
				t.Logf("%s %v", k, v)
			}
		}
	}
}

// replayOf serves a perf.data file's samples on the replay source (beside
// a hand-made counting replay), closed when the test ends, and gathers its
// metrics once.
func replayOf(t *testing.T, samples string) (*Pipeline, []*dto.MetricFamily) {
	t.Helper()
	o := parse(t, []string{"serve", "--source=replay", "--replay.file=../replay/testdata/skx-handmade.csv", "--replay.uarch=skx",
		"--replay.samples=" + samples})
	o.Resolve()
	p, err := replayPipeline(*o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	mfs, err := NewRegistry(p, 0).Gather()
	if err != nil {
		t.Fatal(err)
	}
	return p, mfs
}
