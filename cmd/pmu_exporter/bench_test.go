package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// cgroupProc runs a command inside its own cgroup v2 so that its CPU time, over
// all its threads, can be read exactly from cpu.stat.
type cgroupProc struct {
	name, dir, url string
	cmd            *exec.Cmd
}

func startInCgroup(b *testing.B, name, url string, argv ...string) *cgroupProc {
	b.Helper()
	mnt := testenv.Cgroup2Mount()
	testenv.Require(b, mnt != "", "needs cgroup v2")
	p := &cgroupProc{name: name, url: url, dir: filepath.Join(mnt, fmt.Sprintf("pmu_bench_%s_%d", name, os.Getpid()))}
	if err := os.Mkdir(p.dir, 0o755); err != nil {
		b.Fatal(err)
	}
	fd, err := os.Open(p.dir)
	if err != nil {
		b.Fatal(err)
	}
	defer fd.Close()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
		os.Remove(p.dir)
	})
	for i := 0; ; i++ {
		if err := p.scrape(); err == nil {
			break
		} else if i > 200 {
			b.Fatalf("%s never answered: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

func (p *cgroupProc) scrape() error {
	resp, err := http.Get(p.url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", p.url, resp.Status)
	}
	return nil
}

func (p *cgroupProc) cpu(b *testing.B) time.Duration { return testenv.CgroupUsage(b, p.dir) }

// BenchmarkVsNodeExporterPerf runs pmu_exporter and node_exporter's perf
// collector side by side on the same five software events, read once a
// second (our --collector.counting.interval, their scrape), scraped once a
// second, and reports each process's CPU time per scrape, measured by cgroup
// accounting after all are up. Ours runs three ways: at its defaults (with
// per-cgroup attribution and the comm collector, whose address sampler
// spends up to its 1% budget on work node_exporter does not do), with
// --no-collector.comm (the same events, with attribution), and with neither
// (the same work as node_exporter's); comm-cpu-µs/scrape is the comm
// collector's share, the first less the second. Run with -benchtime=Nx:
// each op is one second.
func BenchmarkVsNodeExporterPerf(b *testing.B) {
	testenv.RequireRoot(b)
	nodeExporter := os.Getenv("NODE_EXPORTER")
	if nodeExporter == "" {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		nodeExporter = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "node_exporter")
	}
	_, err := os.Stat(nodeExporter)
	testenv.Require(b, err == nil, "needs node_exporter: go install github.com/prometheus/node_exporter@v1.12.1")

	cfg := filepath.Join(b.TempDir(), "pmu.yml")
	os.WriteFile(cfg, []byte("default_profile: false\ngroups:\n  - name: software\n    events: [page-faults, context-switches, cpu-migrations, minor-faults, major-faults]\n"), 0o644)
	ours := func(name string, extra ...string) *cgroupProc {
		addr := testenv.FreeAddr(b)
		return startInCgroup(b, name, "http://"+addr+"/metrics", append([]string{binary, "--web.listen-address=" + addr,
			"--collector.counting.interval=1s", "--config.file=" + cfg, "--log.level=warn"}, extra...)...)
	}
	theirs := testenv.FreeAddr(b)
	procs := []*cgroupProc{
		ours("pmu_exporter"),
		ours("pmu_exporter_no_comm", "--no-collector.comm"),
		ours("pmu_exporter_no_comm_no_attribution", "--no-collector.comm", "--no-collector.cgroup"),
		startInCgroup(b, "node_exporter", "http://"+theirs+"/metrics", nodeExporter, "--web.listen-address="+theirs,
			"--collector.disable-defaults", "--collector.perf", "--collector.perf.disable-hardware-profilers",
			"--collector.perf.disable-cache-profilers", "--log.level=warn"),
	}
	time.Sleep(2 * time.Second) // let all settle after start-up
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = p.cpu(b)
	}
	b.ResetTimer()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; i < b.N; i++ {
		<-tick.C
		for _, p := range procs {
			if err := p.scrape(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	cpu := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu[i] = p.cpu(b) - cpu0[i]
		b.ReportMetric(float64(cpu[i].Microseconds())/float64(b.N), p.name+"-cpu-µs/scrape")
	}
	theirsCPU := float64(cpu[3])
	b.ReportMetric(float64(cpu[0])/theirsCPU, "ratio-defaults")
	b.ReportMetric(float64(cpu[1])/theirsCPU, "ratio-no-comm")
	b.ReportMetric(float64(cpu[2])/theirsCPU, "ratio-no-comm-no-attribution")
	b.ReportMetric(float64((cpu[0]-cpu[1]).Microseconds())/float64(b.N), "comm-cpu-µs/scrape")
}

// BenchmarkSamplesVsPerfScript decodes the same perf.data, recorded here
// (every page fault of a few processes, system-wide), with `pmu_exporter
// samples` and with `perf script` printing the same fields, each to
// /dev/null: the offline path against the tool it must agree with.
func BenchmarkSamplesVsPerfScript(b *testing.B) {
	testenv.RequireRoot(b)
	perf := testenv.RequireTool(b, "perf")
	file := filepath.Join(b.TempDir(), "perf.data")
	rec := exec.Command(perf, "record", "-q", "-a", "-e", "page-faults", "-c", "1", "-d", "-W", "--phys-data", "-o", file,
		"--", "sh", "-c", "for i in 1 2 3 4 5 6 7 8; do find /usr/share -type f -name '*.gz' | head -2000 | xargs cat >/dev/null & done; wait")
	if out, err := rec.CombinedOutput(); err != nil {
		b.Fatalf("perf record: %v\n%s", err, out)
	}
	lines, err := exec.Command(perf, "script", "-i", file, "-F", "pid").Output()
	if err != nil {
		b.Fatal(err)
	}
	samples := strings.Count(string(lines), "\n")
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"pmu_exporter_samples", []string{binary, "samples", "-i", file}},
		{"perf_script", []string{perf, "script", "-i", file, "--ns", "-F", perfScriptFields}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				if err := cmd.Run(); err != nil { // stdout and stderr: /dev/null
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(samples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(samples), "samples/file")
		})
	}
}

// BenchmarkSamplingCost measures what sampling costs, side by side in one
// run: each op faults 1000 fresh pages in this process while pmu_exporter
// runs in its own cgroup with page-faults sampling off, limited only by
// the sample rate (period 1, no CPU budget), and governed (period 1, the
// default 1% budget). The workload faults for 3 s first, so the governor
// has settled when measuring starts. ns/op is the workload's perturbation
// (the kernel writes each sample in the fault path); exporter-cpu-µs/op the
// exporter's own cost, from its cgroup's cpu.stat; period the governor's
// final period.
func BenchmarkSamplingCost(b *testing.B) {
	testenv.RequireRoot(b)
	page := os.Getpagesize()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"sampling=off", []string{"--no-collector.sampling"}},
		{"rate-limit-only", []string{"--collector.sampling.event=page-faults", "--collector.sampling.period=1", "--collector.sampling.cpu-budget=100", "--collector.sampling.ring-pages=256"}},
		{"governed", []string{"--collector.sampling.event=page-faults", "--collector.sampling.period=1", "--collector.sampling.ring-pages=256"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			addr := testenv.FreeAddr(b)
			args := append([]string{binary, "--web.listen-address=" + addr, "--no-collector.cgroup", "--log.level=warn"}, c.args...)
			p := startInCgroup(b, "pmu_exporter_"+strings.ReplaceAll(c.name, "=", "_"), "http://"+addr+"/metrics", args...)
			fault := func() {
				mem, err := syscall.Mmap(-1, 0, 1000*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < len(mem); i += page {
					mem[i] = 1
				}
				syscall.Munmap(mem)
			}
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
				fault()
			}
			cpu0 := p.cpu(b)
			b.ResetTimer()
			for range b.N {
				fault()
			}
			b.StopTimer()
			b.ReportMetric(float64((p.cpu(b)-cpu0).Microseconds())/float64(b.N), "exporter-cpu-µs/op")
			resp, err := http.Get(p.url)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, line := range strings.Split(string(body), "\n") {
					if strings.HasPrefix(line, "pmu_sampling_period{") {
						var v float64
						fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
						b.ReportMetric(v, "period")
					}
				}
			}
		})
	}
}

// BenchmarkScrapeCost is what a scrape adds to the exporter's CPU time at
// its defaults: 100 back-to-back scrapes, less what the exporter spends
// meanwhile without them (the same wall time idle just before, by cgroup
// accounting), per scrape, with the series a scrape carries.
func BenchmarkScrapeCost(b *testing.B) {
	testenv.RequireRoot(b)
	addr := testenv.FreeAddr(b)
	p := startInCgroup(b, "pmu_exporter_scrapes", "http://"+addr+"/metrics", binary, "--web.listen-address="+addr, "--log.level=warn")
	time.Sleep(3 * time.Second) // start-up and the first reads
	resp, err := http.Get(p.url)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series := 0
	for _, l := range strings.Split(string(body), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			series++
		}
	}
	const scrapes = 100
	b.ResetTimer()
	var added time.Duration
	for range b.N {
		idle0, began := p.cpu(b), time.Now()
		for range scrapes {
			if err := p.scrape(); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(began)
		busy := p.cpu(b) - idle0
		idle1 := p.cpu(b)
		time.Sleep(took)
		idle := p.cpu(b) - idle1
		added += busy - idle
	}
	b.StopTimer()
	b.ReportMetric(float64(added.Microseconds())/float64(b.N*scrapes), "cpu-µs/scrape")
	b.ReportMetric(float64(series), "series")
}

// The switch-heavy workload's processes (BenchmarkSwitchHeavyWorkload): the
// test binary run again with one of these set.
const (
	pingRoundsEnv = "PMU_BENCH_PING_ROUNDS" // make this many round trips, print ns per round trip
	pongCgroupEnv = "PMU_BENCH_PONG_CGROUP" // the ping's partner goes into this cgroup v2 directory
	pongEnv       = "PMU_BENCH_PONG"        // echo stdin to stdout byte by byte until EOF
)

// pingPongHelper runs this process as a ping or a pong when the benchmark
// started it as one, and says so.
func pingPongHelper() (code int, ok bool) {
	if os.Getenv(pongEnv) != "" {
		var b [1]byte
		for {
			if n, err := syscall.Read(0, b[:]); n != 1 || err != nil {
				return 0, true
			}
			syscall.Write(1, b[:])
		}
	}
	rounds, err := strconv.Atoi(os.Getenv(pingRoundsEnv))
	if err != nil {
		return 0, false
	}
	if err := ping(rounds, os.Getenv(pongCgroupEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "ping:", err)
		return 1, true
	}
	return 0, true
}

// ping starts a pong in the cgroup v2 directory dir and makes rounds pipe
// round trips with it, each a context switch between the two cgroups on
// both sides (blocking reads, one OS thread), and prints the mean ns of one.
func ping(rounds int, dir string) error {
	cg, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer cg.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), pongEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	defer in.Close()
	// The raw descriptors, blocking: no Go scheduler between the switches.
	w, r := int(in.(*os.File).Fd()), int(out.(*os.File).Fd())
	syscall.SetNonblock(w, false)
	syscall.SetNonblock(r, false)
	var b [1]byte
	start := time.Now()
	for range rounds {
		syscall.Write(w, b[:])
		if n, err := syscall.Read(r, b[:]); n != 1 || err != nil {
			return fmt.Errorf("pong answered %d bytes: %v", n, err)
		}
	}
	fmt.Println(time.Since(start).Nanoseconds() / int64(rounds))
	return nil
}

// BenchmarkSwitchHeavyWorkload is what the exporter at its defaults costs
// a workload whose every context switch crosses cgroups: two processes in
// two cgroups making 100,000 pipe round trips. Each op is a pair of runs,
// one without the exporter and one with it started afresh (ready, then
// settled for 2 s), in alternating order, so that the machine's drift and
// other tenants fall on both sides alike; slowdown-% is the median of the
// pairs' ratios, with the medians' ns per round trip beside it and every
// pair on stderr. Run with -benchtime=Nx (N pairs, about 10 s each);
// PMU_BENCH_EXPORTER_ARGS adds flags to the exporter's command line (to
// see what each collector costs).
func BenchmarkSwitchHeavyWorkload(b *testing.B) {
	testenv.RequireRoot(b)
	mnt := testenv.Cgroup2Mount()
	testenv.Require(b, mnt != "", "needs cgroup v2")
	_, dirs := testenv.Cgroups(b, "ping", "pong")
	const rounds = 100000
	run := func() float64 {
		cg, err := os.Open(dirs[0])
		if err != nil {
			b.Fatal(err)
		}
		defer cg.Close()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), pingRoundsEnv+"="+strconv.Itoa(rounds), pongCgroupEnv+"="+dirs[1])
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("ping: %v", err)
		}
		ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			b.Fatalf("ping printed %q", out)
		}
		return ns
	}
	withExporter := func() float64 {
		addr := testenv.FreeAddr(b)
		args := append([]string{"--web.listen-address=" + addr, "--log.level=warn"}, strings.Fields(os.Getenv("PMU_BENCH_EXPORTER_ARGS"))...)
		p := exec.Command(binary, args...)
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { p.Process.Signal(syscall.SIGTERM); p.Wait() }()
		for i := 0; ; i++ {
			resp, err := http.Get("http://" + addr + "/-/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if i > 300 {
				b.Fatalf("the exporter was not ready in 30 s: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		return run()
	}
	run() // warm the page cache and both binaries
	var without, with, ratios []float64
	b.ResetTimer()
	for i := range b.N {
		var w0, w1 float64
		if i%2 == 0 {
			w0 = run()
			w1 = withExporter()
		} else {
			w1 = withExporter()
			w0 = run()
		}
		without, with = append(without, w0), append(with, w1)
		ratios = append(ratios, w1/w0)
	}
	b.StopTimer()
	fmt.Fprintf(os.Stderr, "ns per round trip without / with the exporter, pair by pair: %v / %v\n", without, with)
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(100*(median(ratios)-1), "slowdown-%")
	b.ReportMetric(median(without), "ns/trip-without")
	b.ReportMetric(median(with), "ns/trip-with")
	b.ReportMetric(0, "ns/op")
}
