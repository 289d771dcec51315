package ociimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// dockerfile is what the Dockerfile's final stage says of the image: where
// COPY puts what (source in the build context or the build stage), the
// label keys, USER, EXPOSE and ENTRYPOINT.
type dockerfile struct {
	copies       map[string]string // destination: source
	labels       []string
	user, expose string
	entrypoint   []string
}

func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := dockerfile{copies: map[string]string{}}
	var lines []string
	sc := bufio.NewScanner(f)
	var cur string
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	final := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			final = !strings.Contains(l, " AS ")
		case "COPY":
			if final {
				src, dst := f[len(f)-2], f[len(f)-1]
				if strings.HasPrefix(f[1], "--from=") {
					src = "build:" + src
				}
				d.copies[dst] = src
			}
		case "LABEL":
			if final {
				for _, kv := range f[1:] {
					if k, _, ok := strings.Cut(kv, "="); ok {
						d.labels = append(d.labels, k)
					}
				}
			}
		case "USER":
			d.user = f[1]
		case "EXPOSE":
			d.expose = f[1] + "/tcp"
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(l, f[0]))), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %q: %v", l, err)
			}
		}
	}
	return d
}

// files are the regular files of the image's layers, by path, and its
// directories' modes.
func files(t *testing.T, in Inputs) (map[string][]byte, map[string]int64) {
	t.Helper()
	img, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out, dirs := map[string][]byte{}, map[string]int64{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(in.Created) {
			t.Errorf("%s: owner %d:%d, time %v: want root's, at the build's time", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		name := "/" + strings.TrimSuffix(h.Name, "/")
		if h.Typeflag == tar.TypeDir {
			dirs[name] = h.Mode
			continue
		}
		b, _ := io.ReadAll(tr)
		out[name] = b
	}
	return out, dirs
}

func inputs(t *testing.T) Inputs {
	bin := filepath.Join(t.TempDir(), "pmu_exporter")
	os.WriteFile(bin, []byte("\x7fELF the binary"), 0o755)
	return Inputs{Binary: bin, Replay: "../../examples/replay", Version: "v9.9.9", Revision: "abc", Arch: "arm64", Created: time.Unix(1700000000, 0).UTC()}
}

// The image holds what the Dockerfile copies, where it copies it, byte for
// byte, and its configuration is the Dockerfile's: a second description of
// one image, each checked against the other; and so is the release's
// (Dockerfile.release, GoReleaser's, the binary from its build context).
func TestMatchesDockerfile(t *testing.T) {
	for file, binary := range map[string]string{"../../Dockerfile": "build:/out/pmu_exporter", "../../Dockerfile.release": "${TARGETPLATFORM}/pmu_exporter"} {
		t.Run(path.Base(file), func(t *testing.T) { matches(t, readDockerfile(t, file), binary) })
	}
}

// matches holds the image to d, whose binary comes from binary.
func matches(t *testing.T, d dockerfile, binary string) {
	in := inputs(t)
	got, dirs := files(t, in)
	if len(d.copies) != 2 || d.copies[BinaryPath] != binary || d.copies[ReplayPath] != "examples/replay" {
		t.Fatalf("it copies %v; this package copies the binary (%s) to %s and examples/replay to %s", d.copies, binary, BinaryPath, ReplayPath)
	}
	if want, _ := os.ReadFile(in.Binary); !bytes.Equal(got[BinaryPath], want) {
		t.Errorf("%s is not the binary", BinaryPath)
	}
	n := 0
	filepath.WalkDir(in.Replay, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(in.Replay, p)
		want, _ := os.ReadFile(p)
		if !bytes.Equal(got[path.Join(ReplayPath, filepath.ToSlash(rel))], want) {
			t.Errorf("%s is not in the image as %s", p, path.Join(ReplayPath, rel))
		}
		n++
		return nil
	})
	// The binary, the examples, and distroless's users, groups and /tmp.
	if len(got) != n+1+len(baseFiles) || dirs["/tmp"] != 0o1777 {
		t.Errorf("%d files (want %d), /tmp %o", len(got), n+1+len(baseFiles), dirs["/tmp"])
	}
	if !strings.Contains(string(got["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", got["/etc/passwd"])
	}
	img, _ := Build(in)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != d.user || !slices.Equal(c.Entrypoint, d.entrypoint) || !slices.Equal(slices.Sorted(maps.Keys(c.ExposedPorts)), []string{d.expose}) {
		t.Errorf("user %q, entrypoint %v, ports %v; the Dockerfile's %q, %v, %s", c.User, c.Entrypoint, c.ExposedPorts, d.user, d.entrypoint, d.expose)
	}
	if !slices.Equal(slices.Sorted(maps.Keys(c.Labels)), slices.Sorted(slices.Values(d.labels))) || c.Labels["org.opencontainers.image.version"] != "v9.9.9" {
		t.Errorf("labels %v; the Dockerfile's %v", c.Labels, d.labels)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s, want linux/arm64", cf.OS, cf.Architecture)
	}
}

// The same inputs give the same image, digest for digest; a CA bundle
// lands where distroless keeps it.
func TestReproducible(t *testing.T) {
	in := inputs(t)
	a, _ := Build(in)
	b, _ := Build(in)
	da, err1 := a.Digest()
	db, err2 := b.Digest()
	if err1 != nil || err2 != nil || da != db {
		t.Errorf("two builds: %v %v (%v %v)", da, db, err1, err2)
	}
	in.CACerts = filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(in.CACerts, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	got, _ := files(t, in)
	if string(got["/etc/ssl/certs/ca-certificates.crt"]) != "-----BEGIN CERTIFICATE-----\n" {
		t.Error("no CA bundle at /etc/ssl/certs/ca-certificates.crt")
	}
	c, _ := Build(in)
	if dc, _ := c.Digest(); dc == da {
		t.Error("a different file gave the same digest")
	}
}
