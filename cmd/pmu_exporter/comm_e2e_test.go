package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/comm/comdetect"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// The address sampler live, with no precise PMU: the exporter samples the
// False-Sharing benchmark while it runs and /debug/comm shows its two
// threads communicating on its lines only, all false sharing when every
// access goes to the threads' own slots of one line (f = 1) and all true
// sharing when every access goes to the one shared variable (f = 0).
func TestServeCommLive(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the address sampler decodes x86-64 here")
	}
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	p := start(t, nil, "--web.enable-debug", "--collector.comm.period=200000", "--collector.comm.cpu-budget=0.2")
	for _, c := range []struct {
		f         string
		wantFalse bool
	}{{"1", true}, {"0", false}} {
		cmd := exec.Command(bench, "-mode", "false-sharing", "-f", c.f, "-duration", "3s")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		line, _ := r.ReadBytes('\n')
		var l benchLayout
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("layout %q: %v", line, err)
		}
		r.ReadBytes('\n') // the counts, at the end
		cmd.Wait()
		// The sampler reads its rings every 100 ms; the process's state stays
		// until the exporter sees it gone (a minute).
		var proc comdetect.ProcessJSON
		for range 20 {
			resp, err := http.Get("http://" + p.addr + "/debug/comm?pid=" + strconv.Itoa(l.PID))
			if err != nil {
				t.Fatal(err)
			}
			var rep comdetect.ReportJSON
			err = json.NewDecoder(resp.Body).Decode(&rep)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Processes) == 1 {
				proc = rep.Processes[0]
				break
			}
		}
		d := proc.Detections
		t.Logf("f=%s: %d true, %d false sharing detections, threads %v, lines %d", c.f, d.True, d.False, proc.Threads, len(proc.Lines))
		if d.True+d.False < 20 {
			t.Fatalf("f=%s: only %d detections", c.f, d.True+d.False)
		}
		wrong := d.True
		if !c.wantFalse {
			wrong = d.False
		}
		if wrong*50 > d.True+d.False {
			t.Errorf("f=%s: %d of %d detections of the wrong kind", c.f, wrong, d.True+d.False)
		}
		want := l.Own[0] &^ 63
		if !c.wantFalse {
			want = l.Shared[0] &^ 63
		}
		if len(proc.Lines) == 0 || !strings.EqualFold(proc.Lines[0].Addr, hex(want)) || !strings.Contains(proc.Lines[0].Code[0].Symbol, "main.work") {
			t.Errorf("f=%s: hottest line %+v, want %#x written by main.work", c.f, proc.Lines, want)
		}
	}
	body, _ := p.scrape(t)
	for _, s := range []string{`pmu_address_samples_total{outcome="before_ip"}`, `pmu_comm_detections_total{kind="false_sharing"}`, `pmu_collector_success{collector="comm"} 1`} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}
