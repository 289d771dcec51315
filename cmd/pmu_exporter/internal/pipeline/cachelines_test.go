package pipeline

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/pmu-exporter/pmu_exporter/comm/cacheline"
)

// Serving the Arm SPE example (examples/replay/n1-spe.data): the memory
// samples' loads from peer caches carry snoop="peer", and
// /debug/cachelines?display= ranks as c2c -d does: by peer snoops the
// benchmark's two lines, slots' line first; by HITM none (Arm has no
// HITM); an unknown display is a 400 naming the choices.
func TestReplaySPECachelines(t *testing.T) {
	o := parse(t, []string{"serve", "--source=replay", "--replay.file=../../../../replay/testdata/skx-handmade.csv", "--replay.uarch=skx",
		"--replay.samples=../../../../examples/replay/n1-spe.data"})
	o.Resolve()
	p, err := replayPipeline(*o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mfs, err := NewRegistry(p).Gather()
	if err != nil {
		t.Fatal(err)
	}
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
