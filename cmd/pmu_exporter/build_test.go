package main

import (
	"debug/elf"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// TestStaticBuildStampsVersion builds with scripts/build, as the Dockerfile
// does: the binary must link nothing dynamically (it runs on distroless
// static) and report the version it was given.
func TestStaticBuildStampsVersion(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pmu_exporter")
	cmd := exec.Command("scripts/build", out)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "VERSION=9.8.7-test", "REVISION=0123abc", "BRANCH=testing")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v program header)", p.Type)
		}
	}
	b, err := exec.Command(out, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "version 9.8.7-test") || !strings.Contains(string(b), "revision: 0123abc") {
		t.Errorf("--version: %v\n%s", err, b)
	}
}

// TestDockerfile checks what a docker build would rely on, since no Docker
// engine runs here: the build stage uses scripts/build and the Go of go.mod,
// the final image runs as a numeric non-root user and carries OCI labels.
func TestDockerfile(t *testing.T) {
	df := readFile(t, "../../Dockerfile")
	gomod := readFile(t, "../../go.mod")
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if goVersion == nil || !strings.Contains(df, "ARG GO_VERSION="+goVersion[1]+"\n") {
		t.Errorf("Dockerfile's GO_VERSION is not go.mod's go %v", goVersion)
	}
	stages := strings.Split(df, "\nFROM ")
	if len(stages) != 3 {
		t.Fatalf("want a build stage and a final stage, got %d FROMs", len(stages)-1)
	}
	if !strings.Contains(stages[1], "scripts/build /out/pmu_exporter") {
		t.Error("the build stage does not use scripts/build")
	}
	final := stages[2]
	if m := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindStringSubmatch(final); m == nil || m[1] == "0" {
		t.Errorf("the final image does not run as a numeric non-root user")
	}
	for _, l := range []string{"title", "source", "version", "revision", "licenses"} {
		if !strings.Contains(final, "org.opencontainers.image."+l+"=") {
			t.Errorf("no OCI label %s", l)
		}
	}
	for _, src := range regexp.MustCompile(`(?m)^COPY (?:--from=\S+ )?(\S+)`).FindAllStringSubmatch(df, -1) {
		if strings.HasPrefix(src[1], "/") || src[1] == "." {
			continue
		}
		for _, p := range strings.Fields(src[1]) {
			if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
				t.Errorf("COPY %s: %v", p, err)
			}
		}
	}
}

// TestMakeRunAsRoot runs the README's `make run` as root, as a root shell
// in a Debian container would, where there is no sudo: a sudo first on PATH
// that fails if called stands for its absence. PATH is Debian's
// secure_path (what sudo would leave), which lacks /usr/local/go/bin where
// Go's installer puts go. It must find go, serve, and show a version.
func TestMakeRunAsRoot(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "make")
	addr := testenv.FreeAddr(t)
	noSudo := t.TempDir()
	if err := os.WriteFile(filepath.Join(noSudo, "sudo"), []byte("#!/bin/sh\necho \"sudo: No such file or directory\" >&2\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "run", "ARGS=--web.listen-address="+addr+" --no-collector.sampling --no-collector.cgroup")
	cmd.Dir = "../.."
	cmd.Env = []string{"PATH=" + noSudo + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.Getenv("HOME"),
		"GOMODCACHE=" + goEnv(t, "GOMODCACHE"), "GOCACHE=" + goEnv(t, "GOCACHE")}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		cmd.Wait()
	}()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := regexp.MustCompile(`version=([^,]*),`).FindStringSubmatch(string(b))
			if m == nil || m[1] == "" {
				t.Errorf("the landing page shows no version:\n%s", b)
			}
			return
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatalf("make run did not serve within 3 minutes:\n%s", log.String())
		}
	}
}

// The README's two commands raise privilege only where it is needed: as
// root, make run and make test run as they are; as another user, the
// exporter is built as that user and run through sudo, and so is the
// suite (make -n, as nobody: what make would run).
func TestMakeRaisesPrivilegeOnlyForOthers(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "make")
	dry := func(uid uint32) string {
		cmd := exec.Command("make", "-n", "run", "test")
		cmd.Dir = "../.."
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run test as uid %d: %v\n%s", uid, err, out)
		}
		return string(out)
	}
	lines := func(out string) (build, run, test string) {
		for _, l := range strings.Split(out, "\n") {
			switch {
			case strings.Contains(l, " build ") && strings.Contains(l, "./cmd/pmu_exporter"):
				build = l
			case strings.HasSuffix(strings.TrimSpace(l), "./pmu_exporter"):
				run = strings.TrimSpace(l)
			case strings.HasSuffix(l, "scripts/test"):
				test = strings.TrimSpace(l)
			}
		}
		return build, run, test
	}
	if build, run, test := lines(dry(0)); build == "" || strings.Contains(build, "sudo") || run != "./pmu_exporter" || test != "scripts/test" {
		t.Errorf("as root: build %q, run %q, test %q: want them as they are", build, run, test)
	}
	const nobody = 65534
	if build, run, test := lines(dry(nobody)); build == "" || strings.Contains(build, "sudo") ||
		run != "sudo --preserve-env=PATH ./pmu_exporter" || test != "sudo --preserve-env=PATH scripts/test" {
		t.Errorf("as nobody: build %q, run %q, test %q: want the build as nobody, the rest through sudo", build, run, test)
	}
}

func goEnv(t *testing.T, name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
