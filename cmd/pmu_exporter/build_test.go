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

// TestMakeRunUnderSudo runs the README's `sudo make run` as sudo would: with
// PATH reset to Debian's secure_path, which lacks /usr/local/go/bin where
// Go's installer puts go. It must find go, serve, and show a version.
func TestMakeRunUnderSudo(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "make")
	addr := testenv.FreeAddr(t)
	cmd := exec.Command("make", "run", "ARGS=--web.listen-address="+addr+" --no-collector.sampling --no-collector.cgroup")
	cmd.Dir = "../.."
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.Getenv("HOME"),
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

func goEnv(t *testing.T, name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
