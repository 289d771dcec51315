package main

import (
	"bufio"
	"bytes"
	endian "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/cpuset"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/kernel/perf"
)

// The address sampler live, with no precise PMU: the exporter samples the
// False-Sharing benchmark while it runs and /debug/comm shows its two
// threads communicating on its lines only, all false sharing when every
// access goes to the threads' own slots of one line (f = 1) and all true
// sharing when every access goes to the one shared variable (f = 0).
func TestServeCommLive(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	p := start(t, nil, "--web.enable-debug", "--collector.comm.period=200000", "--collector.comm.cpu-budget=0.2")
	for _, c := range []struct {
		f         string
		wantFalse bool
	}{{"1", true}, {"0", false}} {
		l, proc := benchDetections(t, p, bench, "", c.f)
		d := proc.Detections
		t.Logf("f=%s: %d true, %d false sharing detections, threads %v, lines %d", c.f, d.True, d.False, proc.Threads, len(proc.Lines))
		if d.True+d.False < 20 {
			t.Fatalf("f=%s: only %d detections", c.f, d.True+d.False)
		}
		// The benchmark's own code touches only its two lines; other lines
		// are its Go runtime's (on many CPUs idle Ps share the scheduler's
		// lock), real communication but not the benchmark's.
		own, shared := hex(l.Own[0]&^63), hex(l.Shared[0]&^63)
		var right, wrong, all, bench uint64
		for _, ln := range proc.Lines {
			code := ""
			if len(ln.Code) > 0 {
				code = ln.Code[0].Symbol
			}
			t.Logf("  line %s: %d true, %d false sharing, by %s", ln.Addr, ln.True, ln.False, code)
			all += ln.True + ln.False
			if !strings.EqualFold(ln.Addr, own) && !strings.EqualFold(ln.Addr, shared) {
				if strings.Contains(code, "main.work") {
					t.Errorf("f=%s: line %s, not the benchmark's, written by %s", c.f, ln.Addr, code)
				}
				continue
			}
			bench += ln.True + ln.False
			if c.wantFalse {
				right, wrong = right+ln.False, wrong+ln.True
			} else {
				right, wrong = right+ln.True, wrong+ln.False
			}
		}
		if bench*20 < all*19 {
			t.Errorf("f=%s: the benchmark's lines hold %d of %d sharing, want ≥ 95%%", c.f, bench, all)
		}
		// Samples where the jump after the first atomic lands are not the
		// second's when a skid past the jump explains them (Intel: about
		// 1.7% of the first's samples, 6–9% of the detections before the
		// resolver knew it; docs/sampling.md).
		if wrong*50 > right+wrong {
			t.Errorf("f=%s: %d of %d sharing on the benchmark's lines of the wrong kind", c.f, wrong, right+wrong)
		}
		want := own
		if !c.wantFalse {
			want = shared
		}
		if len(proc.Lines) == 0 || !strings.EqualFold(proc.Lines[0].Addr, want) || !strings.Contains(proc.Lines[0].Code[0].Symbol, "main.work") {
			t.Errorf("f=%s: hottest line %+v, want %s written by main.work", c.f, proc.Lines, want)
		}
	}
	body, _ := p.scrape(t)
	for _, s := range []string{`pmu_address_samples_total{outcome="before_ip"}`, `pmu_comm_detections_total{kind="false_sharing",source="decode"}`, `pmu_collector_success{collector="comm"} 1`} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}

// The decoder's memory bound, live: at 1 KiB (about five instructions) the
// cache turns over many times a second on the False-Sharing benchmark's
// loop alone, stays within the bound, and says so, while what the hot
// loop's samples find is unchanged: its line, all false sharing at f = 1.
// Only the benchmark's cgroup is sampled: a race-built exporter sampling
// busy neighbours too lost 96% of its samples and found nothing.
func TestServeCommDecodeCacheBound(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	top, dirs := testenv.Cgroups(t, "job")
	p := start(t, nil, "--web.enable-debug", "--collector.comm.period=200000", "--collector.comm.cpu-budget=0.2", "--collector.comm.decode-cache=1KiB",
		"--collector.comm.cgroup="+top+"/job")
	l, proc := benchDetections(t, p, bench, dirs[0], "1")
	d := proc.Detections
	t.Logf("%d true, %d false sharing detections", d.True, d.False)
	if d.False < 20 || d.True*50 > d.True+d.False {
		t.Errorf("%d false and %d true sharing detections, want at least 20, all false sharing", d.False, d.True)
	}
	if len(proc.Lines) == 0 || !strings.EqualFold(proc.Lines[0].Addr, hex(l.Own[0]&^63)) {
		t.Errorf("hottest line %+v, want the threads' slots' %#x", proc.Lines, l.Own[0]&^63)
	}
	_, mfs := p.scrape(t)
	held := mustValue(t, mfs, "pmu_address_decode_cache_bytes", nil)
	evicted := mustValue(t, mfs, "pmu_address_decode_cache_evicted_total", nil)
	t.Logf("cache holds %.0f bytes, %.0f instructions evicted", held, evicted)
	if held > 1024 || evicted < 10 {
		t.Errorf("bounded at 1 KiB, the decode cache holds %.0f bytes and evicted %.0f instructions", held, evicted)
	}
}

// C code built as Ubuntu and Fedora build theirs (-fcf-protection: each
// function starts with endbr64, which the decoder must step over to find the
// instruction before a sampled IP): testdata/cetshare's two threads add to
// their own slots of one line, and /debug/comm shows that line falsely
// shared by its work function. Only its cgroup is sampled: sampling every
// task, a noisy CI run once found no sample of cetshare at all (likely the
// exporter's budget went on decoding its neighbours' new binaries, as
// TestServeCommDecodeCacheBound saw under the race detector).
func TestServeCommCETBinary(t *testing.T) {
	testenv.Require(t, runtime.GOARCH == "amd64", "the program is checked as x86-64 code")
	testenv.RequireRoot(t)
	gcc := testenv.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "cetshare")
	if out, err := exec.Command(gcc, "-O2", "-fcf-protection=full", "-pthread", "-o", bin, "testdata/cetshare.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	top, dirs := testenv.Cgroups(t, "job")
	p := start(t, nil, "--web.enable-debug", "--collector.comm.period=200000", "--collector.comm.cpu-budget=0.2",
		"--collector.comm.cgroup="+top+"/job")
	cg, err := os.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(bin, "3")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var l struct {
		PID  int    `json:"pid"`
		Line uint64 `json:"line"`
	}
	if err := json.NewDecoder(out).Decode(&l); err != nil {
		t.Fatalf("cetshare's layout: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cetshare: %v", err)
	}
	proc := awaitCommProcess(t, p.addr, l.PID)
	d := proc.Detections
	t.Logf("%d true, %d false sharing detections, lines %+v", d.True, d.False, proc.Lines)
	if d.False < 20 || d.True*50 > d.True+d.False {
		t.Fatalf("%d false and %d true sharing detections, want at least 20, all false sharing", d.False, d.True)
	}
	if len(proc.Lines) == 0 || !strings.EqualFold(proc.Lines[0].Addr, hex(l.Line)) || !strings.Contains(proc.Lines[0].Code[0].Symbol, "work+") {
		t.Errorf("hottest line %+v, want %#x written by work", proc.Lines, l.Line)
	}
}

// benchDetections runs sharebench at f for 3 s (in the cgroup v2 directory
// dir when set), up to three times, until the exporter finds 20 detections
// in one run, and returns that run's: on a machine whose CPUs other
// processes keep busy the benchmark's two threads seldom run at once (CI
// with four spinning processes on its two CPUs: once none in a run).
func benchDetections(t *testing.T, p *exporterProc, bench, dir, f string) (benchLayout, comdetect.ProcessJSON) {
	t.Helper()
	for try := 1; ; try++ {
		l, wait := runBench(t, bench, dir, f, "3s")
		wait()
		proc := awaitCommProcess(t, p.addr, l.PID)
		if d := proc.Detections; d.True+d.False >= 20 || try == 3 {
			return l, proc
		}
		t.Logf("f=%s, run %d: %d detections; running it again", f, try, proc.Detections.True+proc.Detections.False)
	}
}

// awaitCommProcess is /debug/comm's process pid once the exporter has it:
// the sampler reads its rings every 100 ms, and the process's state stays
// until the exporter sees it gone (a minute). Two seconds at most; then an
// empty process.
func awaitCommProcess(t *testing.T, addr string, pid int) comdetect.ProcessJSON {
	t.Helper()
	for range 20 {
		if proc, ok := commProcess(t, addr, pid); ok {
			return proc
		}
		time.Sleep(100 * time.Millisecond)
	}
	return comdetect.ProcessJSON{}
}

// runBench starts sharebench (in the cgroup dir when set) for duration and
// returns its layout once it runs; wait waits for it to end.
func runBench(t *testing.T, bench, dir, f, duration string) (benchLayout, func() *os.ProcessState) {
	t.Helper()
	cmd := exec.Command(bench, "-mode", "false-sharing", "-f", f, "-duration", duration)
	if dir != "" {
		cg, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	}
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
	return l, func() *os.ProcessState { io.Copy(io.Discard, r); cmd.Wait(); return cmd.ProcessState }
}

// requireDecoder skips where the address decoder cannot read this
// machine's code (it reads x86-64 and arm64); the benchmarks' samples and
// traps are decoded live.
func requireDecoder(t *testing.T) {
	t.Helper()
	_, err := memop.NewResolver(nil, runtime.GOARCH)
	testenv.Require(t, err == nil, fmt.Sprint(err))
}

// commProcess is /debug/comm's process pid, if the exporter has one.
func commProcess(t *testing.T, addr string, pid int) (comdetect.ProcessJSON, bool) {
	resp, err := http.Get("http://" + addr + "/debug/comm?pid=" + strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep comdetect.ReportJSON
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Processes) != 1 {
		return comdetect.ProcessJSON{}, false
	}
	return rep.Processes[0], true
}

// With --collector.comm.cgroup the sampler sees only that cgroup's tasks
// (perf's cgroup mode): of two benchmarks run side by side, only the one
// inside has communication; its cgroup's series hold exactly its
// detections, and the CPU pairs are folded to this host's last-level cache
// domains.
func TestServeCommSelectedCgroup(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	// A cgroup where a kubelet puts a pod (cgroupfs driver), so that
	// /debug/comm?pod= finds it by its UID.
	uid := fmt.Sprintf("0c7d8f16-%04x-2222-3333-444455556666", os.Getpid()&0xffff)
	job := "kubepods/pod" + uid
	top, dirs := testenv.Cgroups(t, "kubepods", job)
	p := start(t, nil, "--web.enable-debug", "--collector.comm.period=200000", "--collector.comm.cpu-budget=0.2",
		"--collector.comm.cgroup="+top+"/"+job)
	in, waitIn := runBench(t, bench, dirs[1], "1", "3s")
	out, waitOut := runBench(t, bench, "", "1", "3s")
	// While the benchmarks run (the pod of a process is read from its
	// /proc/PID/cgroup), the pod filter keeps the one inside.
	time.Sleep(1500 * time.Millisecond)
	for pod, want := range map[string]int{uid: 1, "0c7d8f16-0000-0000-0000-000000000000": 0} {
		resp, err := http.Get("http://" + p.addr + "/debug/comm?pod=" + pod)
		if err != nil {
			t.Fatal(err)
		}
		var rep comdetect.ReportJSON
		json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if len(rep.Processes) != want || want == 1 && rep.Processes[0].PID != uint32(in.PID) {
			t.Errorf("/debug/comm?pod=%s: %d processes, want %d (the benchmark's)", pod, len(rep.Processes), want)
		}
	}
	waitIn()
	waitOut()
	var inside comdetect.ProcessJSON
	for range 20 {
		var ok bool
		if inside, ok = commProcess(t, p.addr, in.PID); ok && inside.Detections.False > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if inside.Detections.False < 20 {
		t.Fatalf("the benchmark in %s/%s: %+v", top, job, inside.Detections)
	}
	if o, ok := commProcess(t, p.addr, out.PID); ok {
		t.Errorf("the benchmark outside the selected cgroup was sampled: %+v", o.Detections)
	}
	// The matrix and the scrape are compared as of one moment: samples
	// the rings still held when the benchmark exited keep coming for a
	// pass or two (CI once scraped one detection more than the matrix it
	// had read before). Until the matrix reads the same before and after
	// the scrape.
	sum := func(m [][]uint64) (v uint64) {
		for i := range m {
			for j := range m[i] {
				v += m[i][j]
			}
		}
		return v
	}
	var mfs map[string]*dto.MetricFamily
	for range 20 {
		_, mfs = p.scrape(t)
		after, _ := commProcess(t, p.addr, in.PID)
		if sum(after.False) == sum(inside.False) && sum(after.CPUAll) == sum(inside.CPUAll) {
			break
		}
		inside = after
		time.Sleep(100 * time.Millisecond)
	}
	// The cgroup's counter holds every detection; the thread matrix not
	// those whose publishing thread had exited (comdetect.ForgetThreads:
	// they count in the totals but in no pair), which happen as the
	// benchmark's threads end one after another (CI: one, 0.1% of the
	// volume). So the counter is the matrix's volume, or a little more.
	volume := sum(inside.False) / 2
	got := mustValue(t, mfs, "pmu_cgroup_comm_volume_total", map[string]string{"cgroup": top + "/" + job, "pod": uid, "kind": "false_sharing"})
	if uint64(got) < volume || got > 1.01*float64(volume) {
		t.Errorf("pmu_cgroup_comm_volume_total of %s/%s: %.0f, the benchmark's matrix holds %d", top, job, got, volume)
	}
	// The CPU matrix holds both kinds (a stray true-sharing detection in
	// the benchmark's runtime happens): so does the folded sum compared.
	var folded float64
	for _, m := range mfs["pmu_comm_domain_volume_total"].GetMetric() {
		folded += m.GetCounter().GetValue()
	}
	cpuVolume := sum(inside.CPUAll)
	if uint64(folded) != cpuVolume/2 {
		t.Errorf("domain-folded communication %.0f, the benchmark's CPU matrix holds %d", folded, cpuVolume/2)
	}
}

// fakeAPIServer answers a node's pod list and watch as the API server
// does (streaming lists included) with pods.
type fakeAPIServer struct{ pods []corev1.Pod }

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	raw := func(p corev1.Pod) (out k8sruntime.RawExtension) {
		out.Raw, _ = json.Marshal(p)
		return out
	}
	enc := json.NewEncoder(w)
	if r.URL.Query().Get("watch") != "true" {
		enc.Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: s.pods})
		return
	}
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		for _, p := range s.pods {
			enc.Encode(metav1.WatchEvent{Type: "ADDED", Object: raw(p)})
		}
		end := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		enc.Encode(metav1.WatchEvent{Type: "BOOKMARK", Object: raw(end)})
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// startWithPods starts the exporter sampling the pods of node-a that a
// fake API server lists as annotated (--collector.comm.pods=annotated),
// with /debug and a sampler budget of 20% of a CPU, and flags.
func startWithPods(t *testing.T, pods []corev1.Pod, flags ...string) *exporterProc {
	srv := httptest.NewServer(&fakeAPIServer{pods: pods})
	t.Cleanup(srv.Close)
	return start(t, nil, append([]string{"--web.enable-debug", "--collector.comm.cpu-budget=0.2", "--collector.comm.pods=annotated",
		"--kubernetes.node-name=node-a", "--kubernetes.kubeconfig=" + kubeconfigFor(t, srv.URL)}, flags...)...)
}

// labPod is a pod of namespace lab on node-a, annotated
// pmu-exporter.io/comm: comm (none where "").
func labPod(name, uid, comm string) corev1.Pod {
	p := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "lab", UID: types.UID(uid), ResourceVersion: "1"},
		Spec:       corev1.PodSpec{NodeName: "node-a"}}
	if comm != "" {
		p.Annotations = map[string]string{"pmu-exporter.io/comm": comm}
	}
	return p
}

// kubeconfigFor writes a kubeconfig that points at url.
func kubeconfigFor(t *testing.T, url string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+url+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// With --collector.comm.pods=annotated only the pods annotated
// pmu-exporter.io/comm=true are sampled (each in perf's cgroup mode): of two
// pods running the benchmark, the annotated one's threads communicate on
// /debug/comm (by its name, from the API), the other's are never sampled.
func TestServeCommAnnotatedPods(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	// UIDs of this run's own: the exporter looks for the pods' cgroups in
	// the whole hierarchy, where another run of this test may be.
	on := fmt.Sprintf("1a2b3c4d-%04x-1111-2222-333344445555", os.Getpid()&0xffff)
	off := fmt.Sprintf("9f8e7d6c-%04x-1111-2222-333344445555", os.Getpid()&0xffff)
	_, dirs := testenv.Cgroups(t, "kubepods", "kubepods/pod"+on, "kubepods/pod"+off)
	p := startWithPods(t, []corev1.Pod{labPod("chosen", on, "true"), labPod("other", off, "")}, "--collector.comm.period=200000")
	in, stopIn := runBench(t, bench, dirs[1], "1", "12s")
	defer stopIn()
	out, stopOut := runBench(t, bench, dirs[2], "1", "12s")
	defer stopOut()
	// The pods are looked for every 5 s, once the API has listed them.
	deadline := time.Now().Add(11 * time.Second)
	var rep comdetect.ReportJSON
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.addr + "/debug/comm?pod=lab/chosen")
		if err != nil {
			t.Fatal(err)
		}
		rep = comdetect.ReportJSON{}
		json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if len(rep.Processes) == 1 && rep.Processes[0].Detections.False >= 20 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(rep.Processes) != 1 || rep.Processes[0].PID != uint32(in.PID) || rep.Processes[0].Detections.False < 20 {
		t.Fatalf("/debug/comm?pod=lab/chosen: %+v, want the annotated pod's benchmark (pid %d) communicating\n%s", rep.Processes, in.PID, p.log)
	}
	if o, ok := commProcess(t, p.addr, out.PID); ok {
		t.Errorf("the benchmark of the pod without the annotation was sampled: %+v", o.Detections)
	}
	if !strings.Contains(p.log.String(), "sampling annotated pod") {
		t.Errorf("the log does not say which pod is sampled:\n%s", p.log)
	}
}

// Each annotated pod chooses what its threads' debug registers serve, on
// a node whose flags turn neither on: a pod annotated watchpoints gets
// ComDetective's trap path (its traps recorded as communication), one
// annotated reuse gets ReuseTracker (its reuse series, under its own pod
// name; none for the other pod), one annotated true is sampled only, as
// the node's flags say; and an unknown value selects nothing and is said.
func TestServeCommPodsChooseRegisters(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	share := buildShareBench(t)
	walker := buildGroundTruth(t, "reusebench")
	uid := func(prefix string) string {
		return fmt.Sprintf("%s-%04x-1111-2222-333344445555", prefix, os.Getpid()&0xffff)
	}
	trap, reused, plain, odd := uid("a1a1a1a1"), uid("b2b2b2b2"), uid("c3c3c3c3"), uid("d4d4d4d4")
	_, dirs := testenv.Cgroups(t, "kubepods", "kubepods/pod"+trap, "kubepods/pod"+reused, "kubepods/pod"+plain, "kubepods/pod"+odd)
	// A wide watch budget, as in TestServeCommWatchpoints: this test is
	// about which pods get which registers. At the default 1%, a race-built
	// exporter beside busy neighbours recorded 6 traps in 11 s.
	p := startWithPods(t, []corev1.Pod{labPod("sharer", trap, "watchpoints"), labPod("walker", reused, "reuse"),
		labPod("plain", plain, "true"), labPod("odd", odd, "yes please")}, "--collector.comm.period=500000",
		"--collector.comm.watch-budget=0.2")
	_, waitShare := runBench(t, share, dirs[1], "0.5", "12s")
	defer waitShare()
	_, waitPlain := runBench(t, share, dirs[3], "0.5", "12s")
	defer waitPlain()
	cg, err := os.Open(dirs[2])
	if err != nil {
		t.Fatal(err)
	}
	walk := exec.Command(walker, "-slots", "1048576", "-duration", "12s")
	walk.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := walk.Start(); err != nil {
		t.Fatal(err)
	}
	cg.Close()
	defer walk.Wait()
	// The pods are looked for every 5 s, once the API has listed them.
	var traps, walkerSamples float64
	var mfs map[string]*dto.MetricFamily
	began := time.Now()
	for deadline := time.Now().Add(11 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		_, mfs = p.scrape(t)
		traps, _ = value(t, mfs, "pmu_comm_watchpoint_traps_total", map[string]string{"outcome": "recorded"})
		walkerSamples, _ = value(t, mfs, "pmu_reuse_samples_total", map[string]string{"pod": "walker"})
		if traps >= 10 && walkerSamples >= 5 {
			break
		}
	}
	t.Logf("%.0f traps recorded as communication, %.0f reuse samples, %v after the benchmarks started", traps, walkerSamples, time.Since(began).Round(time.Millisecond))
	if traps < 10 || walkerSamples < 5 {
		t.Fatalf("%.0f traps recorded as communication (the pod annotated watchpoints), %.0f reuse samples of the pod annotated reuse\n%s", traps, walkerSamples, p.log)
	}
	// Each algorithm's traps and threads apart.
	reuseTraps, _ := value(t, mfs, "pmu_comm_watchpoint_traps_total", map[string]string{"outcome": "reuse"})
	onTrapPath, _ := value(t, mfs, "pmu_comm_watched_threads", map[string]string{"use": "watchpoints"})
	forReuse, _ := value(t, mfs, "pmu_comm_watched_threads", map[string]string{"use": "reuse"})
	if reuseTraps == 0 || onTrapPath < 2 || forReuse < 1 {
		t.Errorf("%.0f traps handed to ReuseTracker, %.0f threads watched on the trap path (the sharer's 2 and the Go runtime's), %.0f for reuse", reuseTraps, onTrapPath, forReuse)
	}
	for _, m := range mfs["pmu_reuse_samples_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "pod" && l.GetValue() != "walker" {
				t.Errorf("reuse samples of pod %q, which did not choose reuse", l.GetValue())
			}
		}
	}
	log := p.log.String()
	for _, want := range []string{`registers=watchpoints`, `registers=reuse`, `registers=none`, `value="yes please"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %s:\n%s", want, log)
		}
	}
}

// With --collector.comm.watchpoints the selected workload's threads are
// armed on lines their process published, and their traps, decoded from
// the trapping instructions, add communication of the right kind: the
// slots' line only false sharing, the shared variable's only true.
func TestServeCommWatchpoints(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	top, dirs := testenv.Cgroups(t, "job")
	// The watch budget is wide (20%): this test is about what the traps
	// record, TestServeCommWatchBudget about the budget. At the default 1%,
	// with two spinning processes beside a race-built exporter, the
	// benchmark got 1.8 s of CPU in 3 s, its 18 ms of traps went mostly to
	// traps after the first of an arm (902 ignored, 14 recorded) and the
	// governor refused the rest of the arms.
	p := start(t, nil, "--web.enable-debug", "--collector.comm.period=500000", "--collector.comm.cpu-budget=0.2",
		"--collector.comm.cgroup="+top+"/job", "--collector.comm.watchpoints", "--collector.comm.watch-budget=0.2")
	l, wait := runBench(t, bench, dirs[0], "0.5", "3s")
	var proc comdetect.ProcessJSON
	var traps float64
	for range 40 {
		time.Sleep(100 * time.Millisecond)
		_, mfs := p.scrape(t)
		traps, _ = value(t, mfs, "pmu_comm_watchpoint_traps_total", map[string]string{"outcome": "recorded"})
		if pr, ok := commProcess(t, p.addr, l.PID); ok && traps > 20 {
			proc = pr
			break
		}
	}
	wait()
	if traps <= 20 || proc.Detections.True+proc.Detections.False == 0 {
		t.Fatalf("%.0f traps recorded, detections %+v\n%s", traps, proc.Detections, p.log)
	}
	for _, line := range proc.Lines {
		switch line.Addr {
		case hex(l.Own[0] &^ 63):
			if line.True != 0 || line.False == 0 {
				t.Errorf("the slots' line: %+v", line)
			}
		case hex(l.Shared[0] &^ 63):
			if line.False != 0 || line.True == 0 {
				t.Errorf("the shared variable's line: %+v", line)
			}
		}
	}
}

// Threads that live 20 ms each (a thread-per-request server's) are never
// in a cgroup's thread list when the exporter reads it, once a second;
// each gets its watchpoints at its first sample instead, and the trap
// path records their false sharing. Before, the watched threads were the
// Go runtime's long-lived ones, which share nothing, and the few traps
// came from a worker the list happened to catch. The budget is wide (20%)
// so that the governor does not bound the traps: 100 to 130 in 7 s here
// with two spinning processes beside, against 4 to 9 before.
func TestServeCommWatchpointsShortLivedThreads(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	churn := buildGroundTruth(t, "threadchurn")
	top, dirs := testenv.Cgroups(t, "job")
	p := start(t, nil, "--collector.comm.period=500000", "--collector.comm.cpu-budget=0.2",
		"--collector.comm.cgroup="+top+"/job", "--collector.comm.watchpoints", "--collector.comm.watch-budget=0.2")
	cg, err := os.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(churn, "-life", "20ms", "-duration", "8s")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var joined, recorded float64
	for range 70 {
		time.Sleep(100 * time.Millisecond)
		_, mfs := p.scrape(t)
		joined, _ = value(t, mfs, "pmu_comm_watched_threads_joined_total", nil)
		recorded, _ = value(t, mfs, "pmu_comm_watchpoint_traps_total", map[string]string{"outcome": "recorded"})
		if joined >= 10 && recorded >= 40 {
			break
		}
	}
	t.Logf("%.0f threads given watchpoints at a sample, %.0f traps recorded", joined, recorded)
	if joined < 10 || recorded < 40 {
		t.Fatalf("%.0f threads given watchpoints at a sample, %.0f traps recorded as communication; want 10 and 40 or more (without: none and 3 to 9 in 7 s)\n%s", joined, recorded, p.log)
	}
}

// The governor keeps what the traps cost the workload within its budget
// (here 0.1% of its CPU time) and the allowance of 16 traps to start with,
// and has to refuse arms to get there. The CPU time it budgets is at most
// what the kernel accounted to the benchmark (its rusage). Its bound is on
// arms, and each arm traps once at most (the kernel disables it), so the
// traps overshoot by what arms were out when the budget ran out: the test
// allows a quarter more (measured: 1.00 times, at 0.103% over 12.7 s
// watched, and at 0.110–0.111% over 3.5–4.1 s watched beside
// scripts/noisy with a CPU taken offline every 5 s). Before arms were
// one-shot, a watchpoint trapped on every access until the reader
// disarmed it, and a slow reader's burst overshot the budget 1.1 to 5.3
// times. With one of the two CPUs taken offline by another process the
// run is measured again (measureRun), judged by the counters' growth.
func TestServeCommWatchBudget(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	bench := buildShareBench(t)
	top, dirs := testenv.Cgroups(t, "job")
	p := start(t, nil, "--collector.comm.period=500000", "--collector.comm.cpu-budget=0.2",
		"--collector.comm.cgroup="+top+"/job", "--collector.comm.watchpoints", "--collector.comm.watch-budget=0.001")
	var ps *os.ProcessState
	before, mfs, _ := p.measureRun(t, func() {
		_, wait := runBench(t, bench, dirs[0], "0.5", "8s")
		ps = wait()
	})
	grew := func(name string) float64 {
		v0, _ := value(t, before, name, nil)
		v, _ := value(t, mfs, name, nil)
		return v - v0
	}
	cpu, spent, denied := grew("pmu_comm_watchpoint_target_cpu_seconds_total"), grew("pmu_comm_watchpoint_trap_cpu_seconds_total"), grew("pmu_comm_watchpoint_arms_denied_total")
	cost, _ := value(t, mfs, "pmu_comm_watchpoint_trap_cost_seconds", nil)
	budget, _ := value(t, mfs, "pmu_comm_watchpoint_budget_ratio", nil)
	ran := (ps.UserTime() + ps.SystemTime()).Seconds()
	t.Logf("benchmark ran %.2f s (rusage), %.2f s watched; traps cost %.2f ms at %.1f µs each (%.3f%%), %v arms refused",
		ran, cpu, spent*1e3, cost*1e6, 100*spent/max(cpu, 1e-9), denied)
	if budget != 0.001 || cost <= 0 || cpu <= 1 || cpu > ran+0.1 {
		t.Fatalf("budget %v, trap cost %v, watched CPU %.2f s of the benchmark's %.2f s\n%s", budget, cost, cpu, ran, p.log)
	}
	if spent > 1.25*(budget*cpu+16*cost) {
		t.Errorf("traps cost %.2f ms, over 1.25 times 0.1%% of %.2f s + the allowance of 16 traps", spent*1e3, cpu)
	}
	if denied == 0 {
		t.Errorf("no arm refused at 0.1%%: the budget never bound")
	}
}

// With --collector.comm.reuse the selected workload's sampled accesses arm
// ReuseTracker's watchpoints: on a thread that stores to every slot of an
// array in turn, each reuse comes a walk after its use (the program times
// its own walk): the histogram's dominant bin holds the walk time, most
// reuses lie within a factor two of it, and one thread alone is not
// invalidated (but for the Go runtime's own threads' words).
func TestServeReuseLive(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	r := runReuseBench(t, nil, nil, "-slots", "4194304", "-duration", "3s")
	h, walk := r.h, r.walk
	dominantBinHolds(t, h, walk, "s")
	// The walker's slots are its alone: a sample of them is never
	// invalidated. The process's Go runtime threads are watched too, and
	// share words of their own (the scheduler's): a sample of one of those
	// may be invalidated by another, for real (once in 125 reuses, in a
	// clean CI run with arms one-shot, so that no trap burst spent the
	// budget). The invalidations are held to that rarity.
	samples := mustValue(t, r.mfs, "pmu_reuse_samples_total", r.lbl)
	if inv := mustValue(t, r.mfs, "pmu_reuse_invalidations_total", r.lbl); inv > max(2, samples/50) {
		t.Errorf("%v invalidations of %v samples of one walking thread (and the runtime's)", inv, samples)
	}
	with := func(name, label, value string) float64 {
		l := maps.Clone(r.lbl)
		l[label] = value
		return mustValue(t, r.mfs, name, l)
	}
	pairs := map[string]float64{}
	var total float64
	for _, p := range []string{"RAR", "RAW", "WAR", "WAW", "unknown"} {
		pairs[p] = with("pmu_reuse_pairs_total", "pair", p)
		total += pairs[p]
	}
	temporal := with("pmu_reuse_locality_total", "locality", "temporal")
	t.Logf("pairs %v, temporal %v", pairs, temporal)
	var observed float64
	for _, m := range r.mfs["pmu_reuse_observed_time_distance_seconds"].GetMetric() {
		if labelsMatch(m, r.clocked()) {
			observed = float64(m.GetHistogram().GetSampleCount())
		}
	}
	if total != observed || temporal < 0.9*total {
		t.Errorf("reuses by pair %v, %v temporal; %v observed: want them all, temporal", pairs, temporal, observed)
	}
	switch reads, writes := pairs["RAR"]+pairs["RAW"], pairs["WAR"]+pairs["WAW"]; runtime.GOARCH {
	case "amd64":
		// The walk's one access is `INCQ (AX)(CX*8)` (go tool objdump): a
		// read-modify-write, a write as a use and a read as a reuse, at
		// the same address each walk: RAW, but for the rare reuses of the
		// process's other threads.
		if pairs["RAW"] < 0.9*total {
			t.Errorf("reuses by pair %v: want RAW", pairs)
		}
	case "arm64":
		// The walk is `MOVD (R0)(R2<<3), R3; ADD $1, R3, R3; MOVD R3,
		// (R0)(R2<<3)`: a use is the load or the store, and its reuse the
		// next walk's load (RAR or RAW), or, for a load sampled while its
		// thread was stopped before the store and armed before it ran on,
		// that store (WAR, far below the walk: below the arm latency,
		// which dominantBinHolds leaves out on arm64).
		short := float64(countUpTo(h, walk/10))
		if reads < 0.9*(total-short) || writes > short+0.1*total {
			t.Errorf("reuses by pair %v, %.0f of them under a tenth of the walk: want reads but for those", pairs, short)
		}
	}
	// Every reuse had its arm; an arm's latency is the reader's reaction
	// (it wakes at each sample), of the order of the walk or below (both
	// CLOCK_MONOTONIC time): idle, a fifth of it; on a 2-CPU machine
	// another test loads, up to twice it (1.9 ms against 1.16 in a CI run
	// beside other work), hence five times as the bound.
	var lat *dto.Histogram
	for _, m := range r.mfs["pmu_reuse_arm_latency_seconds"].GetMetric() {
		lat = m.GetHistogram()
	}
	if n := lat.GetSampleCount(); n < h.GetSampleCount()/10 || lat.GetSampleSum() > 5*float64(n)*r.wallWalk {
		t.Errorf("arm latency: %d arms, mean %.2f ms (the walk %.2f ms, %d reuses estimated)", n, lat.GetSampleSum()/float64(max(n, 1))*1e3, r.wallWalk*1e3, h.GetSampleCount())
	}
	t.Logf("arm latency: %d arms, mean %.2f ms", lat.GetSampleCount(), lat.GetSampleSum()/float64(max(lat.GetSampleCount(), 1))*1e3)
}

// Private reuse distances are the thread's CPU time from use to reuse,
// not the time between: a thread that sleeps 20 ms after each walk reuses
// each slot a walk and a sleep later (over 20 ms), but only a walk of its
// own CPU time later (its clock, read by the benchmark), which is where
// the histogram's reuses must lie.
func TestServeReuseThreadCPUTime(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	// The thread runs a tenth of the time: a budget that keeps the period
	// at 1 ms gives it enough samples.
	r := runReuseBench(t, []string{"--collector.comm.cpu-budget=0.2"}, nil, "-slots", "4194304", "-duration", "4s", "-sleep", "20ms")
	dominantBinHolds(t, r.h, r.walk, "s")
}

// reuseRun is a run of reusebench under the exporter.
type reuseRun struct {
	// walk is the mean walk on the clock of the run (private: the walking
	// thread's CPU time; shared: CLOCK_MONOTONIC; s), or its context
	// switches (--collector.comm.reuse-clock=context-switches); wallWalk
	// is its time on CLOCK_MONOTONIC.
	walk, wallWalk float64
	// lag is, with -follower, the median time from one thread's touch of
	// a chunk to the other's, as the benchmark timed it (s).
	lag float64
	h   *dto.Histogram // the cgroup's reuse histogram of the mode
	mfs map[string]*dto.MetricFamily
	// early is a scrape a quarter of the way through the benchmark's
	// -duration, for what must change as the run goes on.
	early map[string]*dto.MetricFamily
	lbl   map[string]string // the cgroup and mode: the raw counts' labels
	clock string            // the distance clock: h's labels are lbl and clock (clocked)
	log   *logBuffer        // the exporter's
}

// clocked are the labels of the run's distances and estimates: the raw
// counts' and the distance clock.
func (r reuseRun) clocked() map[string]string { return withClock(r.lbl, r.clock) }

// withClock is lbl and the label clock.
func withClock(lbl map[string]string, clock string) map[string]string {
	l := maps.Clone(lbl)
	l["clock"] = clock
	return l
}

// --collector.comm.reuse-clock=accesses where no PMU counts loads and
// stores (this VM, which has no core PMU; QEMU's arm64, whose PMU counts
// neither them nor, without -icount, instructions; a DaemonSet spans such
// nodes too): the comm collector still runs, and where
// pmu_capability{feature="access_counting"} is 0 the log says which clock
// it fell back to and why there are no stack distances (the thread's CPU
// time without a core PMU); an event list that names a PMU this host does
// not have is refused, and the log says which and why.
func TestServeReuseClockWithoutPMU(t *testing.T) {
	testenv.RequireRoot(t)
	pmus, err := pmu.Discover("/sys")
	if err != nil {
		t.Fatal(err)
	}
	noCore := !slices.ContainsFunc(pmus, (*pmu.PMU).IsCore)
	top, _ := testenv.Cgroups(t, "job")
	p := start(t, nil, "--collector.comm.cgroup="+top+"/job", "--collector.comm.reuse", "--collector.comm.reuse-clock=accesses")
	if !testenv.HasFeature(t, hostgate.Watchpoints) {
		// A guest whose debug registers do not trap: the collector
		// refuses, saying so, and the others serve.
		_, mfs := p.scrape(t)
		if v := mustValue(t, mfs, "pmu_collector_success", map[string]string{"collector": "comm"}); v != 0 ||
			!strings.Contains(p.log.String(), "no working watchpoints") {
			t.Errorf("no watchpoints that trap: comm success %v; log:\n%s", v, p.log)
		}
		if v := mustValue(t, mfs, "pmu_collector_success", map[string]string{"collector": "counting"}); v != 1 {
			t.Errorf("no watchpoints that trap: counting success %v beside the refused comm collector", v)
		}
		return
	}
	// Success is 0 until the collector's first pass over its rings.
	var v float64
	for range 50 {
		_, mfs := p.scrape(t)
		if v = mustValue(t, mfs, "pmu_collector_success", map[string]string{"collector": "comm"}); v == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, mfs := p.scrape(t)
	counts := mustValue(t, mfs, "pmu_capability", map[string]string{"feature": "access_counting"}) == 1
	log := p.log.String()
	switch {
	case v != 1:
		t.Errorf("comm success %v; log:\n%s", v, log)
	case noCore && (counts || !strings.Contains(log, "reuse distances on the thread's CPU time, not in accesses")):
		t.Errorf("no core PMU: access_counting %v, and the log does not say the thread's CPU time is the clock:\n%s", counts, log)
	case counts == strings.Contains(log, "not in accesses"):
		t.Errorf("access_counting %v, yet the log says otherwise about the clock:\n%s", counts, log)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/cpu"); err == nil {
		return // the event below names something here
	}
	q := start(t, nil, "--collector.comm.cgroup="+top+"/job", "--collector.comm.reuse", "--collector.comm.reuse-clock=cpu/event=0xd0/")
	_, mfs = q.scrape(t)
	if v := mustValue(t, mfs, "pmu_collector_success", map[string]string{"collector": "comm"}); v != 0 ||
		!strings.Contains(q.log.String(), `comm collector not running`) || !strings.Contains(q.log.String(), "--collector.comm.reuse-clock=cpu/event=0xd0/") {
		t.Errorf("an event of no PMU: comm success %v; log:\n%s", v, q.log)
	}
}

// With --collector.comm.reuse-clock the private distances are counts of
// the given events, read at each watched thread's samples and traps:
// context switches stand in here for a PMU's loads and stores. A thread
// that naps 16 times a walk, and sleeps 10 ms after it, reuses each slot
// after 17 of its switches (more where it is preempted: it counts its
// own, from /proc/thread-self/status), and the event histogram says so.
// The sleep makes a walk outlast the arm latency (a sample is armed at
// the end of the reader's pass over the rings): without it a walk took
// 3 ms, and beside scripts/noisy's neighbours, a CPU offline, most reuses
// were seen two to four walks later (with it, 8 runs so: 17 to 73
// reuses, the dominant bin right in each). Said to
// count accesses (accesses=EVENTS), the clock also gets LRU stack
// distances and miss ratios at this host's caches, read from sysfs: the
// stack-distance histogram holds every sampled access (those not reused
// above its buckets), and a larger cache misses no more than a smaller one
// (LRU's inclusion), each ratio a share; the distances being switches
// here, only their shape is checked.
func TestServeReuseEventClock(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	r := runReuseBench(t, []string{"--collector.comm.reuse-clock=accesses=context-switches", "--collector.comm.cpu-budget=0.2"}, nil,
		"-slots", "1048576", "-duration", "4s", "-naps", "16", "-sleep", "10ms")
	dominantBinHolds(t, r.h, r.walk, "context switches")
	samples := mustValue(t, r.mfs, "pmu_reuse_samples_total", r.lbl)
	var stack *dto.Histogram
	for _, m := range r.mfs["pmu_reuse_stack_distance_lines"].GetMetric() {
		if labelsMatch(m, r.lbl) {
			stack = m.GetHistogram()
		}
	}
	if stack == nil || float64(stack.GetSampleCount()) != samples || stack.GetBucket()[len(stack.GetBucket())-1].GetCumulativeCount() > stack.GetSampleCount() {
		t.Fatalf("stack distances %v, %v samples", stack, samples)
	}
	// The caches sysfs gives a size (QEMU's arm64 gives none: its
	// devicetree describes no caches), smallest first; each has a ratio,
	// the others none, and the log says which. Where sysfs describes no
	// caches (internal/hostgate: some EPYC guests) the exporter sizes them
	// from CPUID, which only its own reading could predict: there the
	// ratios are held to being shares, in order, and the log to saying
	// why any is missing.
	var sizes host.Caches
	sysfsCaches := testenv.HasFeature(t, hostgate.CacheTopology)
	if sysfsCaches {
		var err error
		if sizes, err = host.CacheSizes("/sys", 0); err != nil {
			t.Fatal(err)
		}
	}
	var ratios []float64
	for _, c := range []struct {
		name string
		size uint64
	}{{"L1d", sizes.L1d}, {"L2", sizes.L2}, {"LLC", sizes.LLC}} {
		l := maps.Clone(r.lbl)
		l["cache"] = c.name
		v, ok := value(t, r.mfs, "pmu_reuse_miss_ratio", l)
		if sysfsCaches && ok != (c.size > 0) {
			t.Errorf("%s of %d bytes: miss ratio exported %v", c.name, c.size, ok)
		}
		if ok {
			ratios = append(ratios, v)
		}
	}
	t.Logf("miss ratios %v at %+v; %v samples", ratios, sizes, samples)
	for i, v := range ratios {
		if v < 0 || v > 1 || i > 0 && v > ratios[i-1] {
			t.Errorf("miss ratios %v, smallest cache first: want shares, none above a smaller cache's", ratios)
		}
	}
	if len(ratios) < 3 && !strings.Contains(r.log.String(), "no miss ratios at caches of unknown size") {
		t.Errorf("%d miss ratios, and the log does not say why:\n%s", len(ratios), r.log)
	}
}

// A distance clock that a core PMU counts, live: with
// --collector.comm.reuse-clock=instructions:u each watched thread's group
// counts its user-mode instructions beside its watchpoints, and a reuse is
// the count at the trap minus the count at the sample. The walk's
// instructions, as the kernel counts them on the walking thread for the
// test, must be the histogram's dominant distance (QEMU's arm64 under
// -icount, scripts/arm64-vm). Where no core PMU counts instructions (this
// project's x86 VMs) the exporter refuses the clock, naming the flag, and
// serves the rest.
func TestServeReuseInstructionClock(t *testing.T) {
	requireDecoder(t)
	testenv.RequireRoot(t)
	const clock = "--collector.comm.reuse-clock=instructions:u"
	attr := userInstructions()
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if counts := testenv.HasFeature(t, hostgate.HardwareCounting); counts != (err == nil) {
		t.Fatalf("the host gate says hardware counting is %v, and this thread's instructions open: %v", counts, err)
	}
	if err != nil {
		t.Logf("no core PMU counts this thread's instructions here (perf_event_open: %v)", err)
		top, _ := testenv.Cgroups(t, "job")
		p := start(t, nil, "--collector.comm.cgroup="+top+"/job", "--collector.comm.reuse", clock)
		_, mfs := p.scrape(t)
		log := p.log.String()
		if v := mustValue(t, mfs, "pmu_collector_success", map[string]string{"collector": "comm"}); v != 0 ||
			!strings.Contains(log, "comm collector not running") || !strings.Contains(log, clock) {
			t.Errorf("an instructions clock without a PMU: comm success %v; log:\n%s", v, log)
		}
		served := 0
		for _, m := range mfs["pmu_collector_success"].GetMetric() {
			if !labelsMatch(m, map[string]string{"collector": "comm"}) && m.GetGauge().GetValue() == 1 {
				served++
			}
		}
		if served == 0 {
			t.Errorf("no other collector succeeds beside the refused clock: %v", mfs["pmu_collector_success"])
		}
		return
	}
	unix.Close(fd)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	r := runReuseBench(t, []string{clock, "--collector.comm.cpu-budget=0.2"}, nil, "-slots", "1048576", "-duration", "3s")
	dominantBinHolds(t, r.h, r.walk, "instructions")
}

// userInstructions is perf's instructions:u.
func userInstructions() unix.PerfEventAttr {
	return unix.PerfEventAttr{Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_INSTRUCTIONS,
		Size: perf.AttrSize(), Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
}

// countUserInstructions counts thread tid's user-mode instructions from now
// on; the function returned reads the count (also after the thread ended).
func countUserInstructions(t *testing.T, tid int) func() uint64 {
	t.Helper()
	attr := userInstructions()
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatalf("counting thread %d's instructions: %v", tid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func() uint64 {
		var buf [8]byte
		if _, err := unix.Read(fd, buf[:]); err != nil {
			t.Fatalf("reading thread %d's instructions: %v", tid, err)
		}
		return endian.NativeEndian.Uint64(buf[:])
	}
}

// runReuseBench starts the exporter with ReuseTracker on a cgroup (and
// flags), runs reusebench there (wrapped by wrapper, with args) and
// scrapes it.
func runReuseBench(t *testing.T, flags, wrapper []string, args ...string) reuseRun {
	t.Helper()
	top, dirs := testenv.Cgroups(t, "job")
	// Every CPU open from the start: the sampler follows a CPU that
	// comes online within its governor's half second, which a short run
	// would miss (TestServeReuseSharedAfterHotplug waits for it).
	testenv.AwaitPresentOnline(t, 5*time.Second)
	p := startReuse(t, top, flags)
	return reuseBenchIn(t, p, top, dirs[0], flags, wrapper, args...)
}

// startReuse starts the exporter watching the reuse of cgroup top/job.
func startReuse(t *testing.T, top string, flags []string) *exporterProc {
	t.Helper()
	return start(t, nil, append([]string{"--collector.comm.cgroup=" + top + "/job", "--collector.comm.reuse"}, flags...)...)
}

// reuseBenchIn runs reusebench in cgroup dir (top/job) beside the
// exporter p started with flags, as runReuseBench says.
func reuseBenchIn(t *testing.T, p *exporterProc, top, dir string, flags, wrapper []string, args ...string) reuseRun {
	t.Helper()
	bench := buildGroundTruth(t, "reusebench")
	mode := "private"
	if slices.Contains(flags, "--collector.comm.reuse-mode=shared") {
		mode = "shared"
	}
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	argv := append(append(slices.Clone(wrapper), bench), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	clock := ""
	for _, f := range flags {
		if c, ok := strings.CutPrefix(f, "--collector.comm.reuse-clock="); ok {
			clock = c
		}
	}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Its first line names the walking thread: an instructions clock's
	// walk is what the kernel counts on that thread over the run.
	br := bufio.NewReader(pipe)
	out, _ := br.ReadBytes('\n')
	var instructions func() uint64
	if strings.HasPrefix(clock, "instructions") {
		var hello struct{ TID int }
		if err := json.Unmarshal(out, &hello); err != nil || hello.TID == 0 {
			cmd.Process.Kill()
			t.Fatalf("reusebench said %q: %v", out, err)
		}
		instructions = countUserInstructions(t, hello.TID)
	}
	var early map[string]*dto.MetricFamily
	if i := slices.Index(args, "-duration"); i >= 0 && i+1 < len(args) {
		if d, err := time.ParseDuration(args[i+1]); err == nil {
			time.Sleep(d / 4)
			_, early = p.scrape(t)
		}
	}
	rest, _ := io.ReadAll(br)
	out = append(out, rest...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reusebench %v: %v", args, err)
	}
	var run struct {
		Walks        float64 `json:"walks"`
		WalkNS       int64   `json:"mean_walk_ns"`
		WalkCPUNS    int64   `json:"mean_walk_cpu_ns"`
		WalkSwitches float64 `json:"mean_walk_switches"`
		LagNS        int64   `json:"median_lag_ns"`
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &run); err != nil || run.WalkNS == 0 {
		t.Fatalf("reusebench said %q: %v", out, err)
	}
	// Private reuse is timed on the thread's CPU time, shared on
	// CLOCK_MONOTONIC, or counted in the --collector.comm.reuse-clock
	// events (here context switches): the walk on the same clock.
	clockLabel, walk, family := "wall", float64(run.WalkNS)*1e-9, "pmu_reuse_time_distance_share"
	if mode == "private" {
		clockLabel, walk = "thread_cpu", float64(run.WalkCPUNS)*1e-9
	}
	if clock != "" {
		clockLabel, walk, family = clock, run.WalkSwitches, "pmu_reuse_event_distance_share"
		if strings.HasPrefix(clock, "accesses=") {
			clockLabel = "accesses" // events said to count loads and stores
		}
		if instructions != nil {
			walk = float64(instructions()) / max(run.Walks, 1)
		}
	}
	if run.WalkCPUNS > 0 {
		t.Logf("reusebench: a walk every %.2f ms, %.2f ms of its CPU time", float64(run.WalkNS)/1e6, float64(run.WalkCPUNS)/1e6)
	}
	time.Sleep(300 * time.Millisecond)
	_, mfs := p.scrape(t)
	lbl := map[string]string{"cgroup": top + "/job", "mode": mode}
	h := estimatedHistogram(mfs, family, withClock(lbl, clockLabel))
	if h == nil || h.GetSampleCount() < 10 {
		t.Fatalf("%s reuse histogram of %s/job: %v\n%s\n%s", mode, top, h, reuseAccounts(mfs), p.log)
	}
	return reuseRun{walk: walk, wallWalk: float64(run.WalkNS) * 1e-9, lag: float64(run.LagNS) * 1e-9, h: h, mfs: mfs, early: early, lbl: lbl, clock: clockLabel, log: p.log}
}

// The reported uncertainty shrinks as a run goes on: the 95% interval of
// the dominant bin of the estimate at the end of a run rests on at least
// twice the observations it did a quarter of the way through, with many
// times the watches behind it (about 120 then, 1,500 at the end, here). The
// observations behind an interval are those of the Wilson interval of its
// width at its estimate (the exporter's): its width alone also moves with
// the estimate, narrow near 0 and 1, and on a busy machine the workload's
// walks, and so its distances, shift during a run. A budget of a fifth of
// a CPU keeps the sampler's period near 1 ms (at the default 1% the
// governor lengthens it, and most watches come early).
func TestServeReuseIntervalNarrows(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	r := runReuseBench(t, []string{"--collector.comm.cpu-budget=0.2"}, nil, "-slots", "4194304", "-duration", "4s")
	bins := func(mfs map[string]*dto.MetricFamily) map[string]map[string]float64 {
		out := map[string]map[string]float64{}
		for _, m := range mfs["pmu_reuse_time_distance_share"].GetMetric() {
			if !labelsMatch(m, r.clocked()) {
				continue
			}
			bucket, bound := labelValue(m, "bucket"), labelValue(m, "bound")
			if out[bucket] == nil {
				out[bucket] = map[string]float64{}
			}
			out[bucket][bound] = m.GetGauge().GetValue()
		}
		return out
	}
	end, early := bins(r.mfs), bins(r.early)
	// The dominant bin of those estimated early too: a walk timed near a
	// bin's edge (1.95 ms) may cross it as the machine's load changes.
	var dominant string
	for b, v := range end {
		if _, ok := early[b]["upper"]; !ok {
			continue
		}
		if dominant == "" || v["estimate"] > end[dominant]["estimate"] {
			dominant = b
		}
	}
	e, h := end[dominant], early[dominant]
	watches := func(mfs map[string]*dto.MetricFamily) (n float64) {
		for _, m := range mfs["pmu_reuse_watches_total"].GetMetric() {
			if labelsMatch(m, r.lbl) {
				n += m.GetCounter().GetValue()
			}
		}
		return n
	}
	t.Logf("watches: a quarter of the way %v, at the end %v", watches(r.early), watches(r.mfs))
	t.Logf("dominant bin ≤ %s s: a quarter of the way %.3f [%.3f, %.3f], at the end %.3f [%.3f, %.3f]", dominant, h["estimate"], h["lower"], h["upper"], e["estimate"], e["lower"], e["upper"])
	nEarly, nEnd := wilsonObservations(h), wilsonObservations(e)
	t.Logf("observations behind the intervals: %.0f a quarter of the way, %.0f at the end", nEarly, nEnd)
	if _, ok := h["upper"]; !ok || nEnd < 2*nEarly {
		t.Errorf("the dominant bin's interval rests on %.0f observations at the end, not twice the %.0f a quarter of the way (%v, then %v)", nEnd, nEarly, h, e)
	}
}

// wilsonObservations is the n whose 95% Wilson interval at the estimate
// has the interval's width (bisected: the width falls as n grows).
func wilsonObservations(v map[string]float64) float64 {
	p, want := v["estimate"], v["upper"]-v["lower"]
	width := func(n float64) float64 {
		const z = 1.96
		z2n := z * z / n
		center := (p + z2n/2) / (1 + z2n)
		half := z / (1 + z2n) * math.Sqrt(p*(1-p)/n+z2n/(4*n))
		return min(center+half, 1) - max(center-half, 0)
	}
	lo, hi := 1e-3, 1e9
	for range 200 {
		mid := math.Sqrt(lo * hi)
		if width(mid) > want {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// estimatedHistogram is a cgroup's estimated reuse distances
// (pmu_reuse_*_distance_share{bound="estimate"}) as a classic histogram
// of the sampled accesses they stand for (share × samples, cumulative by
// bucket), for dominantBinHolds; nil where there is none.
func estimatedHistogram(mfs map[string]*dto.MetricFamily, family string, lbl map[string]string) *dto.Histogram {
	want := maps.Clone(lbl)
	want["bound"] = "estimate"
	counted := maps.Clone(lbl)
	delete(counted, "clock") // the raw counts are the clocks'
	var samples float64
	for _, m := range mfs["pmu_reuse_samples_total"].GetMetric() {
		if labelsMatch(m, counted) {
			samples = m.GetCounter().GetValue()
		}
	}
	shares := map[float64]float64{}
	for _, m := range mfs[family].GetMetric() {
		if !labelsMatch(m, want) {
			continue
		}
		if b, err := strconv.ParseFloat(labelValue(m, "bucket"), 64); err == nil {
			shares[b] = m.GetGauge().GetValue()
		}
	}
	if len(shares) == 0 {
		return nil
	}
	bounds := slices.Sorted(maps.Keys(shares))
	h := &dto.Histogram{}
	var cum float64
	for _, b := range bounds {
		cum += shares[b] * samples
		upper, count := b, uint64(math.Round(cum))
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: &upper, CumulativeCount: &count})
	}
	total := uint64(math.Round(cum))
	h.SampleCount = &total
	return h
}

// reuseAccounts prints where a run's samples went (reuse samples and
// drops, arms and refusals, traps by outcome, the watched and trap CPU
// time, the sampler's period), for a failure to say why it saw few reuses.
func reuseAccounts(mfs map[string]*dto.MetricFamily) string {
	var b strings.Builder
	for _, name := range []string{"pmu_reuse_samples_total", "pmu_reuse_samples_dropped_total", "pmu_reuse_stale_traps_total",
		"pmu_comm_watched_threads", "pmu_comm_watched_threads_joined_total", "pmu_comm_watchpoint_arms_total",
		"pmu_comm_watchpoint_arms_denied_total", "pmu_comm_watchpoint_traps_total", "pmu_comm_watchpoint_target_cpu_seconds_total",
		"pmu_comm_watchpoint_trap_cpu_seconds_total", "pmu_comm_sample_period_seconds", "pmu_sampling_samples_total",
		"pmu_sampling_lost_total", "pmu_sampling_throttled_total", "pmu_reuse_arm_latency_seconds"} {
		for _, m := range mfs[name].GetMetric() {
			fmt.Fprintf(&b, "%s %v\n", name, m)
		}
	}
	return b.String()
}

// dominantBinHolds checks a reuse histogram against the distance the
// benchmark measured (want, in unit: "s", or the events counted): the
// dominant bin holds it, or lies
// within half a bin of it (walks vary; the mean over the run is the
// expectation), and 60% of the reuses lie in bins meeting [want/2, 2·want].
// Both over the bins up to ten times want: the benchmark's own accesses
// are reused within a walk and a half (an arm that comes late catches the
// next touch); further out are the reuses of the process's other threads
// (the Go runtime's), rare, far apart, and each weighted by the many that
// slot replacement hid, which one outlier can make the largest bin. On
// arm64 also over the bins above a tenth of want: there the walk's
// increment is a load and a store, and a sampled load is reused by its own
// store, a few instructions on, which an arm from out of process catches
// only when the thread stopped between them (TestServeReuseLive).
func dominantBinHolds(t *testing.T, h *dto.Histogram, want float64, unit string) {
	t.Helper()
	show := func(v float64) string {
		if unit == "s" {
			return fmt.Sprintf("%.2f ms", v*1e3)
		}
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	var prev, best, near, total uint64
	var bestUpper float64
	if runtime.GOARCH == "arm64" {
		prev = countUpTo(h, want/10)
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() > 10*want {
			break
		}
		if b.GetCumulativeCount() <= prev {
			continue
		}
		n := b.GetCumulativeCount() - prev
		total += n
		lower := b.GetUpperBound() / 2
		if n > best {
			best, bestUpper = n, b.GetUpperBound()
		}
		if b.GetUpperBound() > want/2 && lower < want*2 {
			near += n
		}
		prev = b.GetCumulativeCount()
	}
	t.Logf("expected %s; %d reuses estimated, %d up to ten times that, the most in the bin up to %s, %d near; buckets %v",
		show(want), h.GetSampleCount(), total, show(bestUpper), near, h.GetBucket())
	if !(bestUpper/2/1.5 <= want && want <= bestUpper*1.5) {
		t.Errorf("the dominant bin [%s, %s) does not hold %s", show(bestUpper/2), show(bestUpper), show(want))
	}
	if total < 10 || near*10 < total*6 {
		t.Errorf("%d of %d reuses up to ten times %s near it", near, total, show(want))
	}
}

// countUpTo is how many of h's observations lie in its buckets whose
// upper bound is at most x.
func countUpTo(h *dto.Histogram, x float64) uint64 {
	var n uint64
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() <= x {
			n = b.GetCumulativeCount()
		}
	}
	return n
}

// Shared mode: a walker stores to every slot and a follower, half a walk
// behind, loads it (reusebench -follower), both on CPUs of one last-level
// cache: each slot is next touched by the other thread half a walk later,
// so the shared-mode histogram's dominant bin holds that time, and a
// domain that shares its cache sees no invalidation. Both threads keep to
// the clock, a chunk of 4,096 slots every 40 µs, so that half a walk (20
// ms) is well over the arm latency (a sample is armed at the end of its
// pass over the rings, up to 10 ms later; a reuse sooner than that is seen
// a walk later), and stays half a walk on a loaded machine, give or take
// a scheduling delay; the expectation is the median of the times the
// benchmark itself measured from one thread's touch of a chunk to the
// other's.
func TestServeReuseShared(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	testenv.RequireRoot(t)
	shared, _ := cpu0LLC(t)
	testenv.Require(t, strings.ContainsAny(shared, "-,"), "CPU 0 shares its last-level cache with no other CPU: "+shared)
	r := runReuseBench(t,
		[]string{"--collector.comm.period=500000", "--collector.comm.cpu-budget=0.2", "--collector.comm.reuse-mode=shared"},
		[]string{"taskset", "-c", shared}, "-follower", "-slots", "4194304", "-chunk-time", "40us", "-duration", "3s")
	dominantBinHolds(t, r.h, r.lag, "s")
	if v := mustValue(t, r.mfs, "pmu_reuse_invalidations_total", r.lbl); v != 0 {
		t.Errorf("%v invalidations in one cache domain", v)
	}
}

// TestServeReuseSharedAfterHotplug: the exporter starts while a CPU is
// offline (sysfs then lists neither its caches nor it among its
// siblings'), and the CPU comes back before reusebench runs on both: the
// CPU is placed in its last-level cache domain when it is first seen, so
// the follower's domain is the walker's and nothing is invalidated (with
// the domains read once at start, that CPU's threads were a domain of
// their own), and communication is folded to that one domain, named as
// sysfs names its cache.
func TestServeReuseSharedAfterHotplug(t *testing.T) {
	requireDecoder(t)
	testenv.RequireFeature(t, hostgate.Watchpoints)
	cpu, ctl := testenv.HotplugCPU(t)
	shared, domain := cpu0LLC(t)
	cpus, err := cpuset.Parse(shared)
	testenv.Require(t, err == nil && cpuset.Contains(cpus, cpu), fmt.Sprintf("CPU 0 does not share its last-level cache (%q) with CPU %d", shared, cpu))
	top, dirs := testenv.CgroupsHeld(t, "job")
	if err := os.WriteFile(ctl, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--collector.comm.period=500000", "--collector.comm.cpu-budget=0.2", "--collector.comm.reuse-mode=shared"}
	p := startReuse(t, top, flags)
	if err := os.WriteFile(ctl, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the sampler opens on the CPU within its governor's half second
	r := reuseBenchIn(t, p, top, dirs[0], flags, []string{"taskset", "-c", shared}, "-follower", "-slots", "4194304", "-chunk-time", "40us", "-duration", "3s")
	dominantBinHolds(t, r.h, r.lag, "s")
	if v := mustValue(t, r.mfs, "pmu_reuse_invalidations_total", r.lbl); v != 0 {
		t.Errorf("%v invalidations in one cache domain", v)
	}
	for _, m := range r.mfs["pmu_comm_domain_volume_total"].GetMetric() {
		if !labelsMatch(m, map[string]string{"domain_a": domain, "domain_b": domain}) {
			t.Errorf("communication folded to %v; the benchmark's CPUs share %s", m.GetLabel(), domain)
		}
	}
}

// cpu0LLC reads CPU 0's last-level cache from sysfs: the CPUs online
// that share it, and its domain's name as the exporter gives it (its level
// and id, or the CPU list where sysfs gives no id).
func cpu0LLC(t *testing.T) (shared, domain string) {
	t.Helper()
	testenv.RequireFeature(t, hostgate.CacheTopology)
	found := false
	testenv.EveryCPUOnline(t, func() { shared, domain, found = readCPU0LLC() })
	testenv.Require(t, found, "sysfs describes neither an L3 nor an L2 of CPU 0")
	return shared, domain
}

// readCPU0LLC reads cpu0LLC's answer once.
func readCPU0LLC() (shared, domain string, found bool) {
	for _, index := range []string{"index3", "index2"} {
		dir := "/sys/devices/system/cpu/cpu0/cache/" + index + "/"
		b, err := os.ReadFile(dir + "shared_cpu_list")
		if err != nil {
			continue
		}
		shared, domain = strings.TrimSpace(string(b)), strings.TrimSpace(string(b))
		level, _ := os.ReadFile(dir + "level")
		if id, err := os.ReadFile(dir + "id"); err == nil {
			domain = "L" + strings.TrimSpace(string(level)) + "#" + strings.TrimSpace(string(id))
		}
		return shared, domain, true
	}
	return "", "", false
}

// labelValue is m's value of label name ("" where it has none).
func labelValue(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
