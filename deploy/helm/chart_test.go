// Package helm holds the tests of the pmu-exporter Helm chart: lint, the
// schema, renders of every ci/*-values.yaml strictly decoded into the
// Kubernetes and prometheus-operator API types, and a golden render.
package helm

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/plan/config"
)

var update = flag.Bool("update", false, "rewrite testdata/default.golden.yaml from the chart")

const chart = "pmu-exporter"

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := testenv.RequireTool(t, "helm")
	cmd := exec.Command(bin, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("helm %v: %w\n%s", args, err, stderr.String())
	}
	return out.String(), err
}

func render(t *testing.T, values ...string) string {
	t.Helper()
	args := []string{"template", "pmu", chart, "--namespace", "monitoring", "--kube-version", "1.31.0"}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objects is a render decoded strictly: every field must be known to the
// kind's Go type.
type objects struct {
	daemonSet       *appsv1.DaemonSet
	services        []corev1.Service
	configMaps      []corev1.ConfigMap
	serviceAccounts []corev1.ServiceAccount
	clusterRoles    []rbacv1.ClusterRole
	bindings        []rbacv1.ClusterRoleBinding
	serviceMonitors []monitoringv1.ServiceMonitor
	podMonitors     []monitoringv1.PodMonitor
	rules           []monitoringv1.PrometheusRule
	networkPolicies []networkingv1.NetworkPolicy
}

// appendNew appends a zero T to s and returns it, to decode into.
func appendNew[T any](s *[]T) *T {
	*s = append(*s, *new(T))
	return &(*s)[len(*s)-1]
}

func strict(doc []byte, into any) error {
	js, err := sigsyaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

func decode(t *testing.T, rendered string) objects {
	t.Helper()
	var o objects
	dec := yaml.NewDecoder(strings.NewReader(rendered))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("render is not YAML: %v", err)
		}
		doc, err := yaml.Marshal(&node)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ APIVersion, Kind string }
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 DaemonSet":
			o.daemonSet = &appsv1.DaemonSet{}
			into = o.daemonSet
		case "v1 Service":
			into = appendNew(&o.services)
		case "v1 ConfigMap":
			into = appendNew(&o.configMaps)
		case "v1 ServiceAccount":
			into = appendNew(&o.serviceAccounts)
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			into = appendNew(&o.clusterRoles)
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			into = appendNew(&o.bindings)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			into = appendNew(&o.serviceMonitors)
		case "monitoring.coreos.com/v1 PodMonitor":
			into = appendNew(&o.podMonitors)
		case "monitoring.coreos.com/v1 PrometheusRule":
			into = appendNew(&o.rules)
		case "networking.k8s.io/v1 NetworkPolicy":
			into = appendNew(&o.networkPolicies)
		default:
			t.Fatalf("unexpected object %s %s", meta.APIVersion, meta.Kind)
		}
		if err := strict(doc, into); err != nil {
			t.Fatalf("%s: %v\n%s", meta.Kind, err, doc)
		}
	}
	if o.daemonSet == nil {
		t.Fatal("no DaemonSet rendered")
	}
	return o
}

func valuesFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("ci values files: %v %v", files, err)
	}
	return files
}

func TestLint(t *testing.T) {
	for _, v := range append([]string{""}, valuesFiles(t)...) {
		args := []string{"lint", "--strict", chart, "--kube-version", "1.31.0"}
		if v != "" {
			args = append(args, "-f", v)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// TestRenders decodes every values file's render and checks what an
// operator relies on.
func TestRenders(t *testing.T) {
	for _, v := range valuesFiles(t) {
		t.Run(filepath.Base(v), func(t *testing.T) {
			o := decode(t, render(t, v))
			checkDaemonSet(t, o.daemonSet)
			if len(o.services) != 1 || o.services[0].Spec.Ports[0].TargetPort.StrVal != "metrics" {
				t.Errorf("services: %+v", o.services)
			}
			for _, cm := range o.configMaps {
				if f, ok := cm.Data["config.yml"]; ok {
					// The exporter's own parser must accept what the chart writes.
					path := filepath.Join(t.TempDir(), "config.yml")
					os.WriteFile(path, []byte(f), 0o644)
					if _, err := config.Load(path); err != nil {
						t.Errorf("config.yml: %v", err)
					}
				}
			}
		})
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("hostPID is off: the exporter cannot see the node's processes")
	}
	if spec.PriorityClassName == "" {
		t.Error("no priority class: a node agent would be among the first evicted")
	}
	// A toleration with operator Exists and no key or effect tolerates
	// every taint (the Kubernetes API's rule).
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %+v: some taint (NoExecute, say) keeps the exporter off a node", spec.Tolerations)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("containers: %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem is writable")
	}
	if sc.Privileged == nil || !*sc.Privileged {
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("capabilities not dropped: %+v", sc.Capabilities)
		}
		want := []corev1.Capability{"PERFMON", "BPF", "SYS_PTRACE", "SYS_RESOURCE"}
		if !slices.Equal(sc.Capabilities.Add, want) {
			t.Errorf("capabilities added %v, want %v", sc.Capabilities.Add, want)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("privilege escalation allowed")
		}
	} else if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		t.Error("privileged with allowPrivilegeEscalation=false is refused by the API server")
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil {
			t.Fatal("missing probe")
		}
		if g := p.HTTPGet; g != nil && g.Path != "/-/healthy" && g.Path != "/-/ready" {
			t.Errorf("probe on %s (never /metrics)", g.Path)
		}
	}
	if g := c.LivenessProbe.HTTPGet; g != nil && g.Path != "/-/healthy" {
		t.Errorf("liveness on %s", g.Path)
	}
	if g := c.ReadinessProbe.HTTPGet; g != nil && g.Path != "/-/ready" {
		t.Errorf("readiness on %s", g.Path)
	}
	node := false
	for _, e := range c.Env {
		node = node || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !node {
		t.Error("NODE_NAME does not come from the downward API's spec.nodeName")
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
		if !m.ReadOnly {
			t.Errorf("%s is mounted writable", m.MountPath)
		}
	}
	for path, flag := range map[string]string{"/host/sys": "--path.sysfs=", "/host/proc": "--path.procfs=", "/host/sys/fs/cgroup": "--path.cgroupfs="} {
		if _, ok := mounts[path]; !ok {
			t.Errorf("no mount at %s", path)
		}
		if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, flag+"/host/") }) {
			t.Errorf("no %s flag pointing at the host mount", flag)
		}
	}
}

// TestArgsParse runs the exporter with the DaemonSet's arguments: a flag the
// binary does not know makes it exit 2 at once.
func TestArgsParse(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pmu_exporter")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/pmu_exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, v := range valuesFiles(t) {
		o := decode(t, render(t, v))
		var args []string
		for _, a := range o.daemonSet.Spec.Template.Spec.Containers[0].Args {
			if !strings.HasPrefix(a, "--web.listen-address=") && !strings.HasPrefix(a, "--web.config.file=") &&
				!strings.HasPrefix(a, "--config.file=") && !strings.HasPrefix(a, "--replay.file=") {
				args = append(args, a)
			}
		}
		// --help parses every flag first and exits 0; an unknown flag or a bad
		// value exits 2.
		out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: pmu_exporter %v: %v\n%s", v, args, err, out)
		}
	}
}

func TestSchemaRejectsBadValues(t *testing.T) {
	for set, want := range map[string]string{
		"service.port=abc":         "/service/port",
		"source=ebpf":              "/source",
		"collector.interval=often": "/collector/interval",
		"nosuchkey=1":              "nosuchkey",
		"sampling.ringPages=3":     "/sampling/ringPages",
		"sampling.cpuBudget=lots":  "/sampling/cpuBudget",
		"comm.pods=some":           "/comm/pods",
		"comm.watchpoints=yes":     "/comm/watchpoints",
		"comm.reuseOwn=4":          "/comm/reuseOwn",
		"replay.trapCost=often":    "/replay/trapCost",
		// Watchpoints arm every thread of what is sampled: only in the
		// annotated pods.
		"comm.watchpoints=reuse": "/comm/pods",
		// Both monitors scrape every node twice.
		"serviceMonitor.enabled=true,podMonitor.enabled=true": "/podMonitor/enabled",
		"serviceMonitor.metricRelabelings[0].action=delete":   "/serviceMonitor/metricRelabelings/0/action",
		"podMonitor.basicAuth.username.name=only-a-name":      "/podMonitor/basicAuth/username",
		"extraVolumeMounts[0].name=data":                      "/extraVolumeMounts/0",
		"extraEnv[0].value=no-name":                           "/extraEnv/0",
		"hostNetwork=yes":                                     "/hostNetwork",
	} {
		_, err := helm(t, "template", "pmu", chart, "--kube-version", "1.31.0", "--set", set)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want an error naming %s", set, err, want)
		}
	}
}

// The chart carries copies of the rules and dashboards (Helm reads no file
// outside the chart); they must be the originals.
func TestChartCopiesAreCurrent(t *testing.T) {
	pairs := map[string]string{"../prometheus/pmu_exporter.rules.yml": chart + "/rules/pmu_exporter.rules.yml"}
	dashboards, _ := filepath.Glob("../../dashboards/*.json")
	for _, d := range dashboards {
		pairs[d] = filepath.Join(chart, "dashboards", filepath.Base(d))
	}
	copies, _ := filepath.Glob(filepath.Join(chart, "dashboards", "*.json"))
	if len(copies) != len(dashboards) {
		t.Errorf("%d dashboards in the chart, %d in dashboards/", len(copies), len(dashboards))
	}
	for src, dst := range pairs {
		a, err1 := os.ReadFile(src)
		b, err2 := os.ReadFile(dst)
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s is not a copy of %s (run scripts/sync-chart): %v %v", dst, src, err1, err2)
		}
	}
}

// TestMonitoringObjects: with every toggle on, the PrometheusRule holds the
// shipped rule groups and each dashboard has a sidecar-labelled ConfigMap.
// A plain helm template (no --kube-version: helm's default cluster version,
// v1.20, which the chart's kubeVersion once refused) must render the chart.
// helm install --dry-run makes the same check but needs a cluster to reach.
func TestTemplateWithHelmDefaults(t *testing.T) {
	if _, err := helm(t, "template", "pmu", chart); err != nil {
		t.Error(err)
	}
}

func TestMonitoringObjects(t *testing.T) {
	o := decode(t, render(t, filepath.Join(chart, "ci", "monitoring-values.yaml")))
	if len(o.serviceMonitors) != 1 || len(o.podMonitors) != 0 || len(o.rules) != 1 {
		t.Fatalf("monitors %d/%d, rules %d", len(o.serviceMonitors), len(o.podMonitors), len(o.rules))
	}
	// The NetworkPolicy admits the given peers to the metrics port of the
	// DaemonSet's pods, and nothing else.
	if len(o.networkPolicies) != 1 {
		t.Fatalf("%d NetworkPolicies", len(o.networkPolicies))
	}
	np := o.networkPolicies[0].Spec
	if !maps.Equal(np.PodSelector.MatchLabels, o.daemonSet.Spec.Selector.MatchLabels) || len(np.Ingress) != 1 ||
		len(np.Ingress[0].From) != 1 || np.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" ||
		len(np.Ingress[0].Ports) != 1 || np.Ingress[0].Ports[0].Port.IntValue() != 9893 {
		t.Errorf("NetworkPolicy %+v", np)
	}
	var shipped struct {
		Groups []struct {
			Name  string
			Rules []map[string]any
		}
	}
	b, _ := os.ReadFile("../prometheus/pmu_exporter.rules.yml")
	if err := yaml.Unmarshal(b, &shipped); err != nil {
		t.Fatal(err)
	}
	got := o.rules[0].Spec.Groups
	if len(got) != len(shipped.Groups) {
		t.Fatalf("%d rule groups, shipped %d", len(got), len(shipped.Groups))
	}
	for i, g := range shipped.Groups {
		if string(got[i].Name) != g.Name || len(got[i].Rules) != len(g.Rules) {
			t.Errorf("group %d: %s with %d rules, shipped %s with %d", i, got[i].Name, len(got[i].Rules), g.Name, len(g.Rules))
		}
	}
	dashboards, _ := filepath.Glob("../../dashboards/*.json")
	n := 0
	for _, cm := range o.configMaps {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		n++
		if cm.Namespace != "monitoring" {
			t.Errorf("%s in namespace %q", cm.Name, cm.Namespace)
		}
		for name, body := range cm.Data {
			if !json.Valid([]byte(body)) {
				t.Errorf("%s/%s is not JSON", cm.Name, name)
			}
		}
	}
	if n != len(dashboards) || n == 0 {
		t.Errorf("%d dashboard ConfigMaps, %d dashboards", n, len(dashboards))
	}
}

// TestGolden compares the default render with testdata/default.golden.yaml;
// go test -update rewrites it after a deliberate change.
func TestGolden(t *testing.T) {
	got := render(t)
	path := filepath.Join("testdata", "default.golden.yaml")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the default render differs from %s; if the change is meant, run go test ./deploy/helm -update and review the diff", path)
	}
}
