package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// memlock is a process's soft and hard locked-memory limits, as
// /proc/PID/limits gives them (-1: unlimited).
func memlock(t *testing.T, pid int) (soft, hard int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Max locked memory"); ok {
			f := strings.Fields(v)
			if len(f) < 2 {
				t.Fatalf("limits line %q", line)
			}
			n := func(s string) int64 {
				if s == "unlimited" {
					return -1
				}
				x, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					t.Fatalf("limits line %q: %v", line, err)
				}
				return x
			}
			return n(f[0]), n(f[1])
		}
	}
	t.Fatal("no Max locked memory line")
	return 0, 0
}

// holdsSysResource says whether this process may raise hard limits
// (CAP_SYS_RESOURCE, bit 24 of CapEff), as the exporter it starts may.
func holdsSysResource(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<24) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// Started with a locked-memory limit of 64 KiB (hard 128 KiB), the
// exporter lifts it before it maps a ring: to unlimited where it holds
// CAP_SYS_RESOURCE, else its soft limit to the hard one; and says so.
func TestServeRaisesMemlock(t *testing.T) {
	testenv.RequireRoot(t)
	prlimit := testenv.RequireTool(t, "prlimit")
	p := startWrapped(t, nil, []string{prlimit, "--memlock=65536:131072"})
	soft, hard := memlock(t, p.cmd.Process.Pid)
	want := int64(131072)
	if holdsSysResource(t) {
		want = -1
	}
	if soft != want || hard != want {
		t.Errorf("the exporter's locked-memory limit %d (hard %d), want %d (-1: unlimited)", soft, hard, want)
	}
	if !strings.Contains(p.log.String(), "locked-memory limit raised") {
		t.Errorf("the log does not say the limit was raised:\n%s", p.log.tail(4<<10))
	}
}
