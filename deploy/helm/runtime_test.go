package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// image is the exporter's image, built by scripts/image into an OCI layout,
// and its tag there.
type image struct{ layout, tag string }

// buildImage runs scripts/image, as a maintainer or a user would.
func buildImage(t *testing.T) image {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pmu-exporter.oci")
	cmd := exec.Command("../../scripts/image", dir)
	cmd.Env = append(os.Environ(), "VERSION=test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}
	return image{dir, "test"}
}

// bundle unpacks img with umoci into an OCI runtime bundle and rewrites
// its config.json to run the rendered DaemonSet's container as the kubelet
// would (podSpec): its args (the port moved to port), user, capabilities,
// read-only root, host PID namespace, hostPath mounts and NODE_NAME. What
// this differs in is said in docs/deployment.md: runc's own cgroup, no
// seccomp profile (containerd's RuntimeDefault is not at hand), no rlimits
// (root here lacks CAP_SYS_RESOURCE, so none may be raised).
func bundle(t *testing.T, img image, ds *appsv1.DaemonSet, port string, caps []string, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	if out, err := exec.Command("umoci", "unpack", "--image", img.layout+":"+img.tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("umoci unpack: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	process := cfg["process"].(map[string]any)
	process["terminal"] = false
	process["args"] = containerArgs(c, port)
	if args != nil {
		process["args"] = append([]string{"/bin/pmu_exporter"}, args...)
	}
	sc := c.SecurityContext
	process["user"] = map[string]any{"uid": *sc.RunAsUser, "gid": 0}
	var withPrefix []string
	for _, c := range caps {
		withPrefix = append(withPrefix, "CAP_"+c)
	}
	process["capabilities"] = map[string]any{"bounding": withPrefix, "effective": withPrefix, "permitted": withPrefix}
	process["noNewPrivileges"] = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	delete(process, "rlimits")
	hostname, _ := os.Hostname()
	process["env"] = append(process["env"].([]any), "NODE_NAME="+hostname)
	cfg["root"] = map[string]any{"path": "rootfs", "readonly": *sc.ReadOnlyRootFilesystem}
	linux := cfg["linux"].(map[string]any)
	var ns []any
	for _, n := range linux["namespaces"].([]any) {
		if typ := n.(map[string]any)["type"]; typ == "pid" && pod.HostPID || typ == "network" && pod.HostNetwork {
			continue
		}
		ns = append(ns, n)
	}
	linux["namespaces"] = ns
	cfg["mounts"] = append(cfg["mounts"].([]any), hostMounts(t, pod, c)...)
	if b, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// containerArgs are the image's entrypoint and the container's args, its
// listen address on port.
func containerArgs(c corev1.Container, port string) []string {
	args := []string{"/bin/pmu_exporter"}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--web.listen-address=") {
			a = "--web.listen-address=:" + port
		}
		args = append(args, a)
	}
	return args
}

// hostMounts are the container's hostPath volume mounts as bind mounts,
// read-only where the chart says, following the host's mounts where its
// mountPropagation is HostToContainer.
func hostMounts(t *testing.T, pod corev1.PodSpec, c corev1.Container) []any {
	t.Helper()
	var out []any
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Volumes[i].HostPath == nil {
			t.Fatalf("mount %s: no hostPath volume (the runtime test runs the default render)", m.Name)
		}
		opts := []string{"rbind"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationHostToContainer {
			opts = append(opts, "rslave")
		}
		out = append(out, map[string]any{"destination": m.MountPath, "type": "bind", "source": pod.Volumes[i].HostPath.Path, "options": opts})
	}
	return out
}

// container is a runc container running until the test ends.
type container struct {
	id, bundle string
	log        *bytes.Buffer
}

// run starts the bundle under runc.
func run(t *testing.T, id, dir string) *container {
	t.Helper()
	c := &container{id: id, bundle: dir, log: &bytes.Buffer{}}
	cmd := exec.Command("runc", "run", "--bundle", dir, id)
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("runc", "kill", id, "KILL").Run()
		cmd.Wait()
		exec.Command("runc", "delete", "--force", id).Run()
	})
	return c
}

// pid is the container's init process, as runc reports it.
func (c *container) pid(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := exec.Command("runc", "state", c.id).Output()
		var st struct {
			Status string
			Pid    int
		}
		if err == nil && json.Unmarshal(out, &st) == nil && st.Status == "running" && st.Pid > 0 {
			return st.Pid
		}
	}
	t.Fatalf("container %s did not run:\n%s", c.id, c.log)
	return 0
}

// inNet runs argv in the container's network namespace (the pod's).
func (c *container) inNet(t *testing.T, argv ...string) ([]byte, error) {
	t.Helper()
	return exec.Command("nsenter", append([]string{"--target", fmt.Sprint(c.pid(t)), "--net", "--"}, argv...)...).CombinedOutput()
}

// scrape is the container's /metrics on port, from inside its network
// namespace, once it holds every one of wants (or after 30 s).
func (c *container) scrape(t *testing.T, port string, wants ...string) string {
	t.Helper()
	// A new network namespace has its loopback down until someone raises it
	// (the pod's sandbox does, under Kubernetes).
	if out, err := c.inNet(t, "ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		out, err := c.inNet(t, "curl", "-sf", "http://127.0.0.1:"+port+"/metrics")
		last = string(out)
		if err == nil && !slices.ContainsFunc(wants, func(w string) bool { return !strings.Contains(last, w) }) {
			break
		}
	}
	return last
}

// features are each feature's availability in the JSON of `pmu_exporter
// check --format=json`, as argv prints it.
func features(t *testing.T, argv ...string) map[string]bool {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("%v: %v", argv, err)
	}
	var report struct {
		Features []struct {
			Name      string
			Available bool
		}
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	got := map[string]bool{}
	for _, f := range report.Features {
		got[f.Name] = f.Available
	}
	return got
}

// capNumbers are the chart's capabilities' numbers (linux/capability.h).
var capNumbers = map[string]uint{"SYS_PTRACE": 19, "SYS_RESOURCE": 24, "PERFMON": 38, "BPF": 39}

// boundingSet is this process's capability bounding set: what runc can
// grant a container at all.
func boundingSet(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			var set uint64
			fmt.Sscanf(strings.TrimSpace(v), "%x", &set)
			return set
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return 0
}

// hostValues are the chart values this host needs, as an operator would
// set them: on a hybrid cgroup host, v2's hierarchy is at unified/.
func hostValues(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host-values.yaml")
	v := ""
	if out, err := exec.Command("stat", "-f", "-c", "%T", "/sys/fs/cgroup/unified").Output(); err == nil && strings.TrimSpace(string(out)) == "cgroup2fs" {
		v = "cgroup:\n  fsPath: /host/sys/fs/cgroup/unified\n"
	}
	os.WriteFile(path, []byte(v), 0o644)
	return path
}

// TestImageRunsWithTheChartsSettings builds the image with scripts/image
// and runs it under runc, a real OCI runtime, with the rendered
// DaemonSet's settings (bundle): /metrics serves per-cgroup series and the
// comm collector; `check` inside reports what `check` outside reports on
// the same host; and without each of the chart's capabilities in turn,
// check inside loses what docs/deployment.md's table says it loses.
func TestImageRunsWithTheChartsSettings(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"runc", "umoci", "nsenter", "ip", "curl"} {
		testenv.RequireTool(t, tool)
	}
	img := buildImage(t)
	ds := decode(t, render(t, hostValues(t))).daemonSet
	c := ds.Spec.Template.Spec.Containers[0]
	bounding := boundingSet(t)
	var caps []string
	for _, cp := range c.SecurityContext.Capabilities.Add {
		if n, ok := capNumbers[string(cp)]; !ok {
			t.Fatalf("the chart adds %s: give its number in capNumbers", cp)
		} else if bounding&(1<<n) == 0 {
			t.Logf("CAP_%s is not in this host's bounding set (%x): no runtime here can grant it, and the test runs without it", cp, bounding)
		} else {
			caps = append(caps, string(cp))
		}
	}
	const port = "9893" // the container's own network namespace
	ctr := run(t, fmt.Sprintf("pmu-test-%d", os.Getpid()), bundle(t, img, ds, port, caps))
	wants := []string{"pmu_cgroup_events_total{", `pmu_collector_success{collector="comm"} 1`, `pmu_collector_success{collector="cgroup"} 1`}
	metrics := ctr.scrape(t, port, wants...)
	for _, want := range wants {
		if !strings.Contains(metrics, want) {
			t.Errorf("the container's /metrics has no %s", want)
		}
	}
	paths := []string{"--path.sysfs=/host/sys", "--path.procfs=/host/proc", "--path.cgroupfs=" + cgroupFlag(c)}
	inside := features(t, append([]string{"runc", "exec", ctr.id, "/bin/pmu_exporter", "check", "--format=json"}, paths...)...)
	outside := features(t, filepath.Join(ctr.bundle, "rootfs", "bin", "pmu_exporter"), "check", "--format=json")
	if !maps.Equal(inside, outside) {
		t.Errorf("check inside the container %v; outside %v", inside, outside)
	}
	lost := capabilityMatrix(t, img, ds, caps, paths, inside)
	documented, unmeasured := documentedLosses(t)
	for _, cp := range caps {
		if slices.Equal(documented[cp], []string{"not measured"}) {
			t.Errorf("CAP_%s was granted here: docs/deployment.md's table should give what check loses without it, %v, not \"not measured\"", cp, lost[cp])
			continue
		}
		// The table holds for the features this host has; what it loses of
		// the features the table's hosts lacked is news for the table.
		want := slices.DeleteFunc(slices.Clone(documented[cp]), func(f string) bool { return !inside[f] })
		got := slices.DeleteFunc(slices.Clone(lost[cp]), func(f string) bool {
			if unmeasured[f] {
				t.Logf("without CAP_%s check loses %s, which docs/deployment.md's table has not measured", cp, f)
				return true
			}
			return false
		})
		if !slices.Equal(got, want) {
			t.Errorf("without CAP_%s check loses %v; docs/deployment.md says %v of the features this host has", cp, got, want)
		}
	}
	if t.Failed() {
		t.Logf("the exporter's log:\n%s", ctr.log)
	}
}

// cgroupFlag is the container's --path.cgroupfs.
func cgroupFlag(c corev1.Container) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--path.cgroupfs="); ok {
			return v
		}
	}
	return ""
}

// capabilityMatrix runs check in the image once without each of caps,
// and returns the features available with all of them (all) that each
// run lost, by capability.
func capabilityMatrix(t *testing.T, img image, ds *appsv1.DaemonSet, caps, paths []string, all map[string]bool) map[string][]string {
	t.Helper()
	lost := map[string][]string{}
	for _, drop := range caps {
		rest := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
		dir := bundle(t, img, ds, "9893", rest, append([]string{"check", "--format=json"}, paths...)...)
		id := fmt.Sprintf("pmu-test-%d-no-%s", os.Getpid(), strings.ToLower(drop))
		got := features(t, "runc", "run", "--bundle", dir, id)
		exec.Command("runc", "delete", "--force", id).Run()
		for name, ok := range all {
			if ok && !got[name] {
				lost[drop] = append(lost[drop], name)
			}
		}
		slices.Sort(lost[drop])
	}
	return lost
}

// documentedLosses reads docs/deployment.md's measured capability table
// (the one headed "capability dropped"): rows "| `CAP_X` | ... |
// `feature`, `feature` |", the last cell listing what check loses without
// it ("none": nothing; "not measured": what no runtime here can grant);
// and the paragraph after it, the features absent where it was measured
// (unmeasured).
func documentedLosses(t *testing.T) (losses map[string][]string, unmeasured map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	_, table, ok := strings.Cut(string(b), "| capability dropped |")
	if !ok {
		t.Fatal("docs/deployment.md has no table headed \"capability dropped\"")
	}
	table, rest, _ := strings.Cut(table, "\n\n")
	absent, _, _ := strings.Cut(rest, "\n\n")
	if !strings.HasPrefix(absent, "Absent on the guests it was measured on") {
		t.Fatalf("docs/deployment.md: the capability table is not followed by the features absent where it was measured:\n%s", absent)
	}
	unmeasured = map[string]bool{}
	for i, f := range strings.Split(absent, "`") {
		if i%2 == 1 {
			unmeasured[f] = true
		}
	}
	for _, l := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(l, "| "), "|")
		if len(cells) < 2 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`CAP_") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")[len("CAP_"):]
		var feats []string
		for _, f := range strings.Split(cells[len(cells)-1], ",") {
			if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" && f != "none" {
				feats = append(feats, f)
			}
		}
		slices.Sort(feats)
		out[name] = feats
	}
	return out, unmeasured
}
