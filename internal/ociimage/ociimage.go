// Package ociimage assembles the exporter's container image from files, with
// no base image to pull: what the Dockerfile copies onto distroless static
// (the static binary, the replay examples), the few files of that base the
// exporter reads (the users and groups, /tmp, the CA certificates for OTLP
// over TLS), and the Dockerfile's labels, user, port and entrypoint. The
// machines that build it here reach a module proxy and Debian's packages,
// never a registry.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the Dockerfile's COPY lines put the binary and the examples.
const (
	BinaryPath = "/bin/pmu_exporter"
	ReplayPath = "/usr/share/pmu_exporter/replay"
	// User is the Dockerfile's USER: distroless's nonroot. The chart runs
	// the container as uid 0 with four capabilities (docs/deployment.md).
	User = "65532:65532"
	// Port is the Dockerfile's EXPOSE, the exporter's default port.
	Port = "9893/tcp"
)

// Inputs are the files an image is made of, and what its labels say.
type Inputs struct {
	Binary string // the static exporter (scripts/build)
	Replay string // examples/replay
	// CACerts is a CA bundle for /etc/ssl/certs/ca-certificates.crt, as
	// distroless has ("": none).
	CACerts           string
	Version, Revision string
	Arch              string // GOARCH of the binary
	// Created stamps the image and its files (SOURCE_DATE_EPOCH: the same
	// inputs give the same image).
	Created time.Time
}

// baseFiles are distroless static's files that the exporter uses: its
// users and groups (nonroot is 65532) and a world-writable /tmp.
var baseFiles = []struct {
	name, body string
	mode       int64
}{
	{"etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n", 0o644},
	{"etc/group", "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n", 0o644},
}

// Build assembles the image: one layer of the files, and the Dockerfile's
// configuration.
func Build(in Inputs) (v1.Image, error) {
	layerTar, err := layer(in)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "ociimage.Build", Created: v1.Time{Time: in.Created}}})
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", in.Arch, v1.Time{Time: in.Created}
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   []string{BinaryPath},
		ExposedPorts: map[string]struct{}{Port: {}},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:       Labels(in.Version, in.Revision),
	}
	return mutate.ConfigFile(img, cf)
}

// Labels are the Dockerfile's OCI labels.
func Labels(version, revision string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "pmu_exporter",
		"org.opencontainers.image.description": "CPU performance counters, Top-Down and per-pod attribution for Prometheus",
		"org.opencontainers.image.source":      "https://github.com/pmu-exporter/pmu_exporter",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
}

// entry is one file of the layer: its path in the image (no leading /),
// where its bytes come from (a file, or body), its mode.
type entry struct {
	name, from, body string
	mode             int64
	dir              bool
}

// entries are the layer's files, parents first, in a fixed order.
func entries(in Inputs) ([]entry, error) {
	var out []entry
	dirs := map[string]bool{}
	addDirs := func(name string) {
		var parents []string
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, d := range parents {
			out = append(out, entry{name: d, mode: 0o755, dir: true})
		}
	}
	dirs["tmp"] = true
	out = append(out, entry{name: "tmp", mode: 0o1777, dir: true})
	for _, f := range baseFiles {
		addDirs(f.name)
		out = append(out, entry{name: f.name, body: f.body, mode: f.mode})
	}
	if in.CACerts != "" {
		addDirs("etc/ssl/certs/ca-certificates.crt")
		out = append(out, entry{name: "etc/ssl/certs/ca-certificates.crt", from: in.CACerts, mode: 0o644})
	}
	bin := BinaryPath[1:]
	addDirs(bin)
	out = append(out, entry{name: bin, from: in.Binary, mode: 0o755})
	root := ReplayPath[1:]
	addDirs(root) // its parents; the walk adds it
	err := filepath.WalkDir(in.Replay, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(in.Replay, p)
		name := path.Join(root, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			out = append(out, entry{name: name, mode: 0o755, dir: true})
		case d.Type().IsRegular():
			out = append(out, entry{name: name, from: p, mode: 0o644})
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		return nil
	})
	return out, err
}

// layer is the layer's tar: root-owned files, each stamped in.Created.
func layer(in Inputs) ([]byte, error) {
	files, err := entries(in)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range files {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: in.Created, Format: tar.FormatPAX}
		body := []byte(e.body)
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		case e.from != "":
			if body, err = os.ReadFile(e.from); err != nil {
				return nil, fmt.Errorf("image file %s: %w", e.name, err)
			}
			fallthrough
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
