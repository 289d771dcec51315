// Command mkimage writes the exporter's image as an OCI image layout
// (scripts/image runs it): mkimage -binary B -replay DIR -o OUT [-tag T].
// skopeo copies the layout to a registry (oci:OUT:T), podman loads it, and
// umoci unpacks it into a bundle for runc.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/pmu-exporter/pmu_exporter/internal/ociimage"
)

func main() {
	var in ociimage.Inputs
	var out, tag string
	flag.StringVar(&in.Binary, "binary", "pmu_exporter", "the static exporter (scripts/build)")
	flag.StringVar(&in.Replay, "replay", "examples/replay", "the replay examples")
	flag.StringVar(&in.CACerts, "cacerts", "/etc/ssl/certs/ca-certificates.crt", "a CA bundle for the image (\"\": none)")
	flag.StringVar(&in.Version, "version", "dev", "the version label")
	flag.StringVar(&in.Revision, "revision", "unknown", "the revision label")
	flag.StringVar(&in.Arch, "arch", runtime.GOARCH, "the binary's GOARCH")
	flag.StringVar(&out, "o", "pmu-exporter.oci", "the OCI image layout directory to write")
	flag.StringVar(&tag, "tag", "", "the image's ref name in the layout (default: -version)")
	flag.Parse()
	if err := run(in, out, tag); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(in ociimage.Inputs, out, tag string) error {
	in.Created = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		in.Created = time.Unix(sec, 0).UTC()
	}
	if in.CACerts != "" {
		if _, err := os.Stat(in.CACerts); err != nil {
			return fmt.Errorf("-cacerts: %w (Debian's ca-certificates has it; -cacerts= builds without)", err)
		}
	}
	img, err := ociimage.Build(in)
	if err != nil {
		return err
	}
	if tag == "" {
		tag = in.Version
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}
