package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// TestServeHostileFIFO is issue 56's first finding, as the issue asks it
// to be tested: an ordinary user (nobody) maps a library, renames it
// away, puts a FIFO at its path and spins inside the library, beside the
// exporter at its defaults, whose address sampler then samples code that
// the mapping names a FIFO. Before the fix, the decoder blocked in the
// FIFO's open holding its lock, and every scrape after it hung, for good.
// Now, during and after: every scrape answers within 5 s with every part
// fresh (pmu_scrape_stale_total stays 0: nothing waited on a stuck
// collector), /-/healthy answers 200, the samples in the library are
// counted as unreadable_code, and SIGTERM ends the exporter within 5 s.
func TestServeHostileFIFO(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	lib, swap := buildFIFOSwap(t, 0o777) // nobody makes its FIFO there
	p := start(t, nil)
	_, mfs := p.scrape(t)
	unreadable0 := unreadableCode(t, mfs)

	hostile := exec.Command(swap, lib, "6")
	hostile.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := hostile.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	hostile.Stderr = os.Stderr
	if err := hostile.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "swapped\n" {
		hostile.Wait()
		t.Fatalf("fifoswap said %q, not swapped", line)
	}
	if fi, err := os.Lstat(lib); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("%s is not a FIFO now: %v %v", lib, fi, err)
	}
	var wg sync.WaitGroup
	exited := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(exited)
		hostile.Wait()
	}()
	probe := &prober{t: t, addr: p.addr, client: &http.Client{Timeout: 5 * time.Second}}
	for running := true; running; {
		select {
		case <-exited:
			running = false
		case <-time.After(250 * time.Millisecond):
			probe.once()
		}
	}
	wg.Wait()
	for range 8 { // after it has gone
		probe.once()
		time.Sleep(250 * time.Millisecond)
	}
	last := probe.once()
	unreadable := unreadableCode(t, last)
	t.Logf("%d scrapes, the slowest %v; unreadable_code samples %v -> %v", probe.scrapes, probe.slowest, unreadable0, unreadable)
	if unreadable <= unreadable0 {
		t.Errorf("no sample counted as unreadable_code while the library's path was a FIFO (%v -> %v): the test did not reach the decoder's open", unreadable0, unreadable)
	}
	took, err := p.terminate(5 * time.Second)
	if err != nil {
		t.Errorf("after the FIFO: %v (SIGTERM answered in %v)", err, took)
	}
	t.Logf("SIGTERM to exit: %v", took)
}

// unreadableCode counts the samples whose code the decoder could not
// read: the address sampler's unreadable_code outcome; or, on a host
// whose precise PMU samples instead (PEBS, IBS, SPE: the comm collector's
// default there), its samples whose width went unknown, which the decoder
// reads from the same code (kernel IPs among them: a floor still holds).
func unreadableCode(t *testing.T, mfs map[string]*dto.MetricFamily) float64 {
	t.Helper()
	if v, ok := value(t, mfs, "pmu_address_samples_total", map[string]string{"outcome": "unreadable_code"}); ok {
		return v
	}
	v, _ := value(t, mfs, "pmu_comm_access_widths_total", map[string]string{"outcome": "unknown"})
	return v
}

// buildFIFOSwap builds testdata/fifoswap's library and program with gcc
// into a directory of the given mode (with its parent), for nobody to run.
func buildFIFOSwap(t *testing.T, mode os.FileMode) (lib, swap string) {
	t.Helper()
	gcc := testenv.RequireTool(t, "gcc")
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	lib, swap = filepath.Join(dir, "libspin.so"), filepath.Join(dir, "fifoswap")
	for _, build := range [][]string{
		{"-O2", "-shared", "-fPIC", "-o", lib, "testdata/fifoswap/spin.c"},
		{"-O2", "-o", swap, "testdata/fifoswap/main.c", "-ldl"},
	} {
		if out, err := exec.Command(gcc, build...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", build, err, out)
		}
	}
	return lib, swap
}

// prober scrapes /metrics and asks /-/healthy, each within its client's
// timeout, and fails the test on a slow or failed answer or a stale part.
type prober struct {
	t       *testing.T
	addr    string
	client  *http.Client
	scrapes int
	slowest time.Duration
}

// once scrapes and asks for health once; it returns the scrape's families.
func (p *prober) once() map[string]*dto.MetricFamily {
	t := p.t
	t.Helper()
	start := time.Now()
	resp, err := p.client.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %d: %v after %v", p.scrapes+1, err, time.Since(start))
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape %d: %s %v", p.scrapes+1, resp.Status, err)
	}
	p.scrapes++
	p.slowest = max(p.slowest, took)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("scrape %d: %v", p.scrapes, err)
	}
	for _, m := range mfs["pmu_scrape_stale_total"].GetMetric() {
		if v := m.GetCounter().GetValue(); v != 0 {
			t.Errorf("scrape %d: pmu_scrape_stale_total%v = %v: a collector's part waited past --web.collect-timeout", p.scrapes, m.GetLabel(), v)
		}
	}
	h, err := p.client.Get("http://" + p.addr + "/-/healthy")
	if err != nil {
		t.Fatalf("/-/healthy: %v", err)
	}
	hb, _ := io.ReadAll(h.Body)
	h.Body.Close()
	if h.StatusCode != 200 {
		t.Errorf("/-/healthy: %s %s", h.Status, hb)
	}
	return mfs
}

// TestServeWithoutSysPtrace: root without CAP_SYS_PTRACE (a container
// that did not add it) cannot read the code of another user's process.
// It says so in check, once in the log, and in
// pmu_capability{feature="code_reads"}; a process of nobody's that it
// samples ends as unreadable_code.
func TestServeWithoutSysPtrace(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	drop := []string{setpriv, "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"}
	out, _ := exec.Command(drop[0], append(drop[1:], binary, "check")...).CombinedOutput()
	if !strings.Contains(string(out), "[no]  code_reads          no CAP_SYS_PTRACE") || strings.Contains(string(out), "CAP_SYS_PTRACE\n") {
		t.Errorf("check without CAP_SYS_PTRACE does not say code_reads is missing:\n%s", out)
	}
	lib, swap := buildFIFOSwap(t, 0o755) // nobody cannot make its FIFO there
	// A budget that keeps the period short however busy the machine: the
	// process runs two seconds, and its samples are what is judged.
	p := startWrapped(t, nil, drop, "--collector.comm.cpu-budget=0.2")
	_, mfs := p.scrape(t)
	if v := mustValue(t, mfs, "pmu_capability", map[string]string{"feature": "code_reads"}); v != 0 {
		t.Errorf(`pmu_capability{feature="code_reads"} = %v without CAP_SYS_PTRACE`, v)
	}
	if n := strings.Count(p.log.String(), `msg="capability missing" feature=code_reads reason="no CAP_SYS_PTRACE`); n != 1 {
		t.Errorf("the log says code_reads is missing %d times, want once:\n%s", n, p.log.tail(4<<10))
	}
	unreadable0 := unreadableCode(t, mfs)
	// nobody's process, in its own code for a second; fifoswap's FIFO
	// goes in a directory nobody cannot write, so it stops there.
	hostile := exec.Command(swap, lib, "1")
	hostile.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	hostile.CombinedOutput()
	time.Sleep(300 * time.Millisecond)
	_, mfs = p.scrape(t)
	unreadable := unreadableCode(t, mfs)
	t.Logf("unreadable_code samples %v -> %v", unreadable0, unreadable)
	if unreadable <= unreadable0 {
		t.Errorf("no sample of nobody's process counted unreadable without CAP_SYS_PTRACE (%v -> %v)", unreadable0, unreadable)
	}
}

// TestInputsRefusedBeforeRead: every file a user names is opened only
// if it is a regular file within its kind's ceiling, and refused at once
// otherwise with the flag, the size and the ceiling (issue 56: a 200 MB
// definitions file took 3.1 GB and was still parsing after 150 s; a FIFO
// given as a file blocked for ever). The oversized files are sparse: the
// test writes nothing to speak of.
func TestInputsRefusedBeforeRead(t *testing.T) {
	dir := t.TempDir()
	sparse := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := sparse("defs.yaml", 200<<20)
	csv := sparse("big.csv", 300<<20)
	trace := sparse("trace.txt", 5<<30)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"topdown", "--uarch=spr", "--definitions=" + yaml, "-"}, "--definitions " + yaml + ": too large: 209715200 bytes, over the 16 MiB it may be"},
		{[]string{"topdown", "--uarch=spr", csv}, "topdown FILE " + csv + ": too large: 314572800 bytes, over the 256 MiB it may be"},
		{[]string{"topdown", "--uarch=spr", fifo}, "topdown FILE: open " + fifo + ": not a regular file"},
		{[]string{"reuse", "--trace=" + trace}, "--trace " + trace + ": too large: 5368709120 bytes, over the 4 GiB it may be"},
		{[]string{"samples", fifo}, "open " + fifo + ": not a regular file"},
		{[]string{"check", "--config.file=" + yaml}, "--config.file " + yaml + ": too large"},
		{[]string{"--source=replay", "--replay.file=" + csv, "--web.listen-address=127.0.0.1:0"}, "--replay.file " + csv + ": too large: 314572800 bytes, over the 256 MiB it may be"},
	} {
		cmd := exec.Command(binary, c.args...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(buf.String(), c.says) {
				t.Errorf("%v: %v, want an error saying %q:\n%s", c.args, err, c.says, buf.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%v: still running after 10 s:\n%s", c.args, buf.String())
		}
	}
}
