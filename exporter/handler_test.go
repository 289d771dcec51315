package exporter

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The handler compresses when the client asks, as Prometheus does, and the
// compressed body is the same exposition as the plain one.
func TestHandlerCompression(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCgroup(manyCgroups{cgroupSnapshot(20)}, nil, AttributedByBPF))
	h, err := Handler(reg, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(encoding string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Accept-Encoding", encoding)
		resp, err := http.DefaultTransport.RoundTrip(req) // no transparent gunzip
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			r = z
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	plainResp, plain := get("identity")
	zResp, unzipped := get("gzip")
	if ce := plainResp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("identity asked, Content-Encoding %q", ce)
	}
	if ce := zResp.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Errorf("gzip asked, Content-Encoding %q", ce)
	}
	if zResp.Header.Get("Vary") == "" {
		t.Error("a compressed response without Vary")
	}
	// The handler's own request counter has moved between the two.
	if len(plain) < 10000 || pmuSeries(plain) != pmuSeries(unzipped) {
		t.Errorf("plain (%d bytes) and gunzipped (%d bytes) expositions differ", len(plain), len(unzipped))
	}
	if ct := zResp.Header.Get("Content-Type"); ct != plainResp.Header.Get("Content-Type") || ct == "" {
		t.Errorf("Content-Type %q compressed, %q plain", ct, plainResp.Header.Get("Content-Type"))
	}
}

// pmuSeries are the exposition's lines of pmu_ families.
func pmuSeries(b []byte) string {
	var out strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(l, "pmu_") {
			out.WriteString(l)
		}
	}
	return out.String()
}
