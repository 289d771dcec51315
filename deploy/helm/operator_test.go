package helm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// The knobs operators reach for land where a pod spec and
// prometheus-operator read them (ci/operator-values.yaml).
func TestOperatorValues(t *testing.T) {
	o := decode(t, render(t, filepath.Join(chart, "ci", "operator-values.yaml")))
	spec := o.daemonSet.Spec.Template.Spec
	c := spec.Containers[0]
	if len(spec.Volumes) == 0 || spec.Volumes[len(spec.Volumes)-1].Name != "recordings" || spec.Volumes[len(spec.Volumes)-1].HostPath == nil {
		t.Errorf("extraVolumes: %+v", spec.Volumes)
	}
	if m := c.VolumeMounts[len(c.VolumeMounts)-1]; m.Name != "recordings" || m.MountPath != "/recordings" {
		t.Errorf("extraVolumeMounts: %+v", c.VolumeMounts)
	}
	if e := c.Env[len(c.Env)-1]; e.Name != "GOMEMLIMIT" || e.Value != "200MiB" || c.Env[0].Name != "NODE_NAME" {
		t.Errorf("extraEnv after NODE_NAME: %+v", c.Env)
	}
	if spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil || *spec.SecurityContext.FSGroup != 65532 {
		t.Errorf("podSecurityContext: %+v", spec.SecurityContext)
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v with dnsPolicy %q, want true and ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if o.daemonSet.Spec.Template.Labels["team"] != "perf" || o.daemonSet.Spec.Template.Annotations["example.com/team"] != "perf" {
		t.Errorf("podLabels, podAnnotations: %v %v", o.daemonSet.Spec.Template.Labels, o.daemonSet.Spec.Template.Annotations)
	}
	if len(o.serviceMonitors) != 1 || len(o.serviceMonitors[0].Spec.Endpoints) != 1 {
		t.Fatalf("service monitors: %+v", o.serviceMonitors)
	}
	ep := o.serviceMonitors[0].Spec.Endpoints[0]
	if ep.Scheme == nil || *ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil ||
		ep.TLSConfig.CA.Secret.Name != "pmu-web-config" || ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != "pmu-exporter" {
		t.Errorf("TLS: scheme %v, tlsConfig %+v", ep.Scheme, ep.TLSConfig)
	}
	if ep.BasicAuth == nil || ep.BasicAuth.Username.Name != "pmu-scrape" || ep.BasicAuth.Password.Key != "password" {
		t.Errorf("basicAuth %+v", ep.BasicAuth)
	}
	// instance is the node's first, the operator's relabelings after it.
	if len(ep.RelabelConfigs) != 2 || ep.RelabelConfigs[0].TargetLabel != "instance" || ep.RelabelConfigs[1].TargetLabel != "node" {
		t.Errorf("relabelings %+v", ep.RelabelConfigs)
	}
	if len(ep.MetricRelabelConfigs) != 1 || ep.MetricRelabelConfigs[0].Action != "drop" {
		t.Errorf("metricRelabelings %+v", ep.MetricRelabelConfigs)
	}
}

// A web config of basic auth alone (webConfigTLS false) is scraped over
// http, with the credentials (ci/podmonitor-values.yaml).
func TestPodMonitorBasicAuthOverHTTP(t *testing.T) {
	o := decode(t, render(t, filepath.Join(chart, "ci", "podmonitor-values.yaml")))
	if len(o.podMonitors) != 1 || len(o.serviceMonitors) != 0 {
		t.Fatalf("monitors: %d service, %d pod", len(o.serviceMonitors), len(o.podMonitors))
	}
	ep := o.podMonitors[0].Spec.PodMetricsEndpoints[0]
	if ep.Scheme != nil && *ep.Scheme != "http" || ep.TLSConfig != nil || ep.BasicAuth == nil || ep.BasicAuth.Username.Key != "username" {
		t.Errorf("scheme %v, tlsConfig %+v, basicAuth %+v: want http with basic auth", ep.Scheme, ep.TLSConfig, ep.BasicAuth)
	}
}

// NOTES.txt names the image to be pulled and, for the default one that no
// registry publishes yet, what to do (helm template does not render NOTES:
// a copy of the chart renders it as a ConfigMap).
func TestNotes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), chart)
	if out, err := exec.Command("cp", "-r", chart, dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "templates", "notes.yaml"), []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
data:
  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}
`), 0o644)
	notes := func(set ...string) string {
		args := []string{"template", "pmu", dir, "--show-only", "templates/notes.yaml"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var cm corev1.ConfigMap
		if err := sigsyaml.Unmarshal([]byte(out), &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["notes"]
	}
	def := notes()
	if !strings.Contains(def, "Image: ghcr.io/pmu-exporter/pmu-exporter:0.1.0") || !strings.Contains(def, "ImagePullBackOff") ||
		!strings.Contains(def, "docs/deployment.md") {
		t.Errorf("default NOTES do not name the image and what to do where it does not exist:\n%s", def)
	}
	own := notes("image.repository=registry.example/pmu", "image.tag=v1")
	if !strings.Contains(own, "Image: registry.example/pmu:v1") || strings.Contains(own, "ImagePullBackOff") {
		t.Errorf("NOTES for an image of one's own:\n%s", own)
	}
}

// TestServiceMonitorScrapesTLSAndBasicAuth: the exporter serves a web
// config with TLS (a certificate of a CA of the test's) and basic auth, and
// Debian's Prometheus scrapes it with the scrape configuration that
// prometheus-operator makes of the rendered ServiceMonitor's endpoint (its
// scheme, tlsConfig and basicAuth, the Secrets' keys as files, and its
// metricRelabelings). It is up; the same endpoint without basicAuth is
// refused, and without tlsConfig the certificate is not trusted.
func TestServiceMonitorScrapesTLSAndBasicAuth(t *testing.T) {
	prom := testenv.RequireTool(t, "prometheus")
	o := decode(t, render(t, filepath.Join(chart, "ci", "operator-values.yaml")))
	ep := o.serviceMonitors[0].Spec.Endpoints[0]
	dir := t.TempDir()
	secrets := webSecrets(t, dir)
	addr := testenv.FreeAddr(t)
	bin := filepath.Join(dir, "pmu_exporter")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/pmu_exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	testenv.Start(t, filepath.Join(dir, "exporter.log"), bin, "--web.listen-address="+addr, "--web.config.file="+secrets["pmu-web-config"]["web-config.yml"],
		"--source=replay", "--replay.file=../../examples/replay/skx-synthetic.csv", "--replay.uarch=skx")
	noAuth, noTLS := ep, ep
	noAuth.BasicAuth, noTLS.TLSConfig = nil, nil
	jobs := map[string]map[string]any{
		"rendered": scrapeConfig(t, ep, secrets, addr),
		"no-auth":  scrapeConfig(t, noAuth, secrets, addr),
		"no-tls":   scrapeConfig(t, noTLS, secrets, addr),
	}
	var cfg struct {
		Global        map[string]string `json:"global"`
		ScrapeConfigs []map[string]any  `json:"scrape_configs"`
	}
	cfg.Global = map[string]string{"scrape_interval": "1s"}
	for name, job := range jobs {
		job["job_name"] = name
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, job)
	}
	b, err := sigsyaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfgFile, b, 0o644)
	promAddr := testenv.FreeAddr(t)
	testenv.Start(t, filepath.Join(dir, "prometheus.log"), prom, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	want := map[string]float64{"rendered": 1, "no-auth": 0, "no-tls": 0}
	var got map[string]float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		got = upByJob(promAddr)
		if len(got) == len(want) && got["rendered"] == 1 {
			break
		}
	}
	for job, w := range want {
		if v, ok := got[job]; !ok || v != w {
			t.Errorf("up{job=%q} = %v (scraped: %v), want %v", job, v, ok, w)
		}
	}
	// The metricRelabelings drop go_*: pmu_* arrives, go_* does not.
	if n := count(promAddr, `{job="rendered",__name__=~"pmu_.*"}`); n == 0 {
		t.Error("no pmu_* series scraped")
	}
	if n := count(promAddr, `{job="rendered",__name__=~"go_.*"}`); n != 0 {
		t.Errorf("%d go_* series: the metricRelabelings did not apply", n)
	}
	if t.Failed() {
		for _, l := range []string{"exporter.log", "prometheus.log", "prometheus.yml"} {
			b, _ := os.ReadFile(filepath.Join(dir, l))
			t.Logf("%s:\n%s", l, b)
		}
	}
}

// webSecrets writes the Secrets that operator-values.yaml names, by name
// and key, as files: pmu-web-config (the exporter's web config: a server
// certificate for pmu-exporter from a fresh CA, and basic auth of user
// scraper; and the CA), pmu-scrape (that user and password).
func webSecrets(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pmu-exporter"}, DNSNames: []string{"pmu-exporter"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crt := write("tls.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})))
	tlsKey := write("tls.key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return map[string]map[string]string{
		"pmu-web-config": {
			"web-config.yml": write("web-config.yml", fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  scraper: %s\n", crt, tlsKey, hash)),
			"ca.crt":         write("ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))),
		},
		"pmu-scrape": {"username": write("username", "scraper"), "password": write("password", "s3cret")},
	}
}

// scrapeConfig is Prometheus's scrape configuration of a ServiceMonitor
// endpoint at addr, as prometheus-operator writes it: the Secrets' keys
// (files under secrets) as files or, for a user name, inline.
func scrapeConfig(t *testing.T, ep monitoringv1.Endpoint, secrets map[string]map[string]string, addr string) map[string]any {
	t.Helper()
	file := func(s *corev1.SecretKeySelector) string {
		p, ok := secrets[s.Name][s.Key]
		if !ok {
			t.Fatalf("the endpoint names Secret %s key %s, which operator-values.yaml's cluster would hold", s.Name, s.Key)
		}
		return p
	}
	job := map[string]any{"static_configs": []map[string]any{{"targets": []string{addr}}}}
	if ep.Scheme != nil {
		job["scheme"] = string(*ep.Scheme)
	}
	if tc := ep.TLSConfig; tc != nil {
		tls := map[string]any{}
		if tc.CA.Secret != nil {
			tls["ca_file"] = file(tc.CA.Secret)
		}
		if tc.ServerName != nil {
			tls["server_name"] = *tc.ServerName
		}
		if tc.InsecureSkipVerify != nil {
			tls["insecure_skip_verify"] = *tc.InsecureSkipVerify
		}
		job["tls_config"] = tls
	}
	if ba := ep.BasicAuth; ba != nil {
		user, err := os.ReadFile(file(&ba.Username))
		if err != nil {
			t.Fatal(err)
		}
		job["basic_auth"] = map[string]string{"username": string(user), "password_file": file(&ba.Password)}
	}
	var relabel []map[string]any
	for _, r := range ep.MetricRelabelConfigs {
		m := map[string]any{"action": strings.ToLower(r.Action)}
		if len(r.SourceLabels) > 0 {
			m["source_labels"] = r.SourceLabels
		}
		if r.Regex != "" {
			m["regex"] = r.Regex
		}
		relabel = append(relabel, m)
	}
	if relabel != nil {
		job["metric_relabel_configs"] = relabel
	}
	return job
}

// upByJob is up by job, from Prometheus's API at addr.
func upByJob(addr string) map[string]float64 {
	res := query(addr, "up")
	out := map[string]float64{}
	for _, r := range res {
		var v float64
		fmt.Sscan(fmt.Sprint(r.Value[1]), &v)
		out[r.Metric["job"]] = v
	}
	return out
}

// count is how many series match sel now.
func count(addr, sel string) int { return len(query(addr, sel)) }

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

func query(addr, q string) []sample {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Data struct {
			Result []sample `json:"result"`
		} `json:"data"`
	}
	json.Unmarshal(b, &r)
	return r.Data.Result
}
