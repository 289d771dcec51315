package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// blocking is a collector whose Collect waits until release is closed, so a
// scrape stays in flight as long as the test wants.
type blocking struct {
	entered chan struct{}
	release chan struct{}
	desc    *prometheus.Desc
}

func (b *blocking) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }
func (b *blocking) Collect(ch chan<- prometheus.Metric) {
	b.entered <- struct{}{}
	<-b.release
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, 1)
}

// With --web.max-requests=2, a third scrape while two are in flight is
// answered 503, and the handler's own metrics say so, as node_exporter's do.
func TestMetricsHandlerLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := &blocking{entered: make(chan struct{}, 4), release: make(chan struct{}), desc: prometheus.NewDesc("slow", "A collector that waits.", nil, nil)}
	reg.MustRegister(b)
	h, err := exporter.Handler(reg, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	<-b.entered
	<-b.entered // two scrapes are in Collect
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("third scrape: %s, want 503", resp.Status)
	}
	close(b.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("an admitted scrape got %d", c)
		}
	}
	// The next scrape is admitted (it reads the counters' state before its
	// own request is counted) and reports the rejection.
	b.release = make(chan struct{})
	close(b.release)
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`promhttp_metric_handler_requests_total{code="503"} 1`, `promhttp_metric_handler_requests_total{code="200"} 2`,
		"promhttp_metric_handler_requests_in_flight 1", `promhttp_metric_handler_errors_total{cause="gathering"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
}

// openSockets is the number of pid's fds that are sockets: the listener and
// the connections. Not all its fds: the exporter's per-CPU events come and
// go with the CPUs another process takes offline and back.
func openSockets(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if to, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(to, "socket:") {
			n++
		}
	}
	return n
}

// Idle keep-alive connections are closed after --web.idle-timeout, and the
// exporter's sockets go back to what they were.
func TestServeClosesIdleConnections(t *testing.T) {
	testenv.RequireRoot(t)
	const idle = 2 * time.Second
	p := start(t, nil, "--web.idle-timeout="+idle.String())
	time.Sleep(300 * time.Millisecond)
	before := openSockets(t, p.cmd.Process.Pid)
	var conns []net.Conn
	var opened []time.Time // when each connection's request was answered
	for range 50 {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns = append(conns, c)
		opened = append(opened, time.Now())
	}
	// Every connection answered less than the idle timeout ago is still
	// open and holds an fd (on a busy machine the first ones may already
	// have timed out).
	held := 0
	for _, at := range opened {
		if time.Since(at) < idle-200*time.Millisecond {
			held++
		}
	}
	if n := openSockets(t, p.cmd.Process.Pid); held == 0 || n < before+held {
		t.Fatalf("%d sockets with %d connections open, %d before", n, held, before)
	}
	time.Sleep(idle + 500*time.Millisecond)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection %d still open after the idle timeout: %d bytes, %v", i, n, err)
		}
	}
	if n := openSockets(t, p.cmd.Process.Pid); n > before+2 {
		t.Errorf("%d sockets after the idle connections were closed, %d before", n, before)
	}
}

// Debug endpoints (pids, addresses, paths; pprof) are off unless asked for,
// and when on they sit behind the same basic auth as /metrics; the landing
// page offers pprof only when it is served.
func TestServeDebugEndpoints(t *testing.T) {
	testenv.RequireRoot(t)
	get := func(p *exporterProc, path string, auth bool) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+p.addr+path, nil)
		if auth {
			req.SetBasicAuth("prom", "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	off := start(t, nil, "--collector.sampling.event=page-faults")
	for _, path := range []string{"/debug/cachelines", "/debug/pprof/"} {
		if code, _ := get(off, path, false); code != http.StatusNotFound {
			t.Errorf("%s without --web.enable-debug: %d", path, code)
		}
	}
	if _, page := get(off, "/", false); strings.Contains(page, "debug/pprof") || strings.Contains(page, "/debug/cachelines") {
		t.Errorf("the landing page links debug endpoints that are off:\n%s", page)
	}
	if !strings.Contains(off.log.String(), "debug endpoints are off") {
		t.Errorf("the log does not say the debug endpoints are off:\n%s", off.log)
	}

	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	cfg := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(cfg, []byte("basic_auth_users:\n  prom: "+string(hash)+"\n"), 0o644)
	on := startAuthed(t, testenv.FreeAddr(t), "--collector.sampling.event=page-faults", "--web.enable-debug", "--web.config.file="+cfg)
	for _, path := range []string{"/debug/cachelines", "/debug/pprof/", "/metrics"} {
		if code, _ := get(on, path, false); code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d", path, code)
		}
		if code, _ := get(on, path, true); code != http.StatusOK {
			t.Errorf("%s with credentials: %d", path, code)
		}
	}
	if _, page := get(on, "/", true); !strings.Contains(page, "debug/pprof/heap") || !strings.Contains(page, "/debug/cachelines") {
		t.Errorf("the landing page does not offer the debug endpoints it serves:\n%s", page)
	}
}

// startAuthed runs the binary behind basic auth (user prom, password s3cret
// in args' web config) and waits until it is ready.
func startAuthed(t *testing.T, addr string, args ...string) *exporterProc {
	t.Helper()
	p := &exporterProc{addr: addr, log: &logBuffer{}}
	p.cmd = exec.Command(binary, append([]string{"--web.listen-address=" + addr, "--collector.counting.interval=100ms"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGTERM); p.cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/-/ready", nil)
		req.SetBasicAuth("prom", "s3cret")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
	}
	t.Fatalf("not ready in 10s:\n%s", p.log)
	return nil
}

// A truncated --web.config.file stops the exporter with an error that names
// the file.
func TestServeBadWebConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(cfg, []byte("tls_server_config:\n  cert_file: \"x"), 0o644)
	out, err := exec.Command(binary, "--web.config.file="+cfg, "--web.listen-address="+testenv.FreeAddr(t)).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--web.config.file "+cfg+": yaml: line 2") {
		t.Errorf("truncated web config: %v\n%s", err, out)
	}
}

// TestServeConnectionsLeaveFDsToCollectors: under an open-file limit of
// 256, 400 clients that connect and say nothing (slowloris) get no more
// connections than half the descriptors the collectors left free; the
// rest wait in the kernel's backlog. The exporter's descriptors stay
// under the limit (no accept fails with EMFILE), it says it capped the
// connections, and once the clients go a scrape is answered.
func TestServeConnectionsLeaveFDsToCollectors(t *testing.T) {
	testenv.RequireRoot(t)
	prlimit := testenv.RequireTool(t, "prlimit")
	const limit = 256
	// --web.max-connections=1000, beyond what 256 descriptors allow.
	p := startWrapped(t, nil, []string{prlimit, fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"}, "--web.max-connections=1000")
	logged := regexp.MustCompile(`msg="HTTP connections capped below --web.max-connections, to keep file descriptors for the collectors" max_connections=(\d+) asked=1000 open_files_limit=256 free=(\d+)`)
	m := logged.FindStringSubmatch(p.log.String())
	if m == nil {
		t.Fatalf("the exporter did not say it capped the connections:\n%s", p.log)
	}
	capped, _ := strconv.Atoi(m[1])
	free, _ := strconv.Atoi(m[2])
	if capped != max(free/2, 4) {
		t.Errorf("capped at %d connections with %d descriptors free; want half", capped, free)
	}
	before := openSockets(t, p.cmd.Process.Pid)
	var conns []net.Conn
	for range 400 {
		c, err := net.DialTimeout("tcp", p.addr, 2*time.Second)
		if err != nil {
			break // the backlog is full: the kernel refuses, not the exporter
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond) // the exporter accepts what it may
	held := openSockets(t, p.cmd.Process.Pid) - before
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d clients connected; the exporter holds %d of them, capped at %d, %d descriptors in all", len(conns), held, capped, len(fds))
	if held > capped+1 || len(fds) >= limit {
		t.Errorf("%d connections held (cap %d), %d descriptors (limit %d)", held, capped, len(fds), limit)
	}
	for _, c := range conns {
		c.Close()
	}
	client := &http.Client{Timeout: 15 * time.Second}
	resp, err := client.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape after the clients went: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("scrape after the clients went: %s", resp.Status)
	}
	if strings.Contains(p.log.String(), "too many open files") {
		t.Errorf("the exporter ran out of descriptors:\n%s", p.log.tail(4<<10))
	}
}

// TestServeScrapeBesideSlowClients: 1,000 clients that connect and send
// nothing, within the default connection cap, leave a scrape answered at
// once (issue 56's "what held": a normal scrape in 3 ms beside 1,000
// slowloris connections).
func TestServeScrapeBesideSlowClients(t *testing.T) {
	testenv.RequireRoot(t)
	p := start(t, nil)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 1000 {
		c, err := net.DialTimeout("tcp", p.addr, 2*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	resp, err := client.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape beside 1000 silent connections: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("scrape beside 1000 silent connections: %s in %v", resp.Status, took)
	if resp.StatusCode != 200 || took > 2*time.Second {
		t.Errorf("scrape beside 1000 silent connections: %s in %v", resp.Status, took)
	}
}
