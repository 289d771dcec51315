package main

import (
	"strings"
	"testing"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// capSysResource is CAP_SYS_RESOURCE's bit (linux/capability.h).
const capSysResource = 24

// Started with a locked-memory limit of 64 KiB (hard 128 KiB), the
// exporter lifts it before it maps a ring: to unlimited where it holds
// CAP_SYS_RESOURCE (as this test does, if it does), else its soft limit
// to the hard one; and says so. The limits are the kernel's (prlimit).
func TestServeRaisesMemlock(t *testing.T) {
	testenv.RequireRoot(t)
	prlimit := testenv.RequireTool(t, "prlimit")
	self, err := procfs.Self()
	if err != nil {
		t.Fatal(err)
	}
	st, err := self.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(131072)
	if st.CapEff&(1<<capSysResource) != 0 {
		want = unix.RLIM_INFINITY
	}
	p := startWrapped(t, nil, []string{prlimit, "--memlock=65536:131072"})
	var got unix.Rlimit
	if err := unix.Prlimit(p.cmd.Process.Pid, unix.RLIMIT_MEMLOCK, nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Cur != want || got.Max != want {
		t.Errorf("the exporter's locked-memory limit %d (hard %d), want %d (%d: unlimited)", got.Cur, got.Max, want, uint64(unix.RLIM_INFINITY))
	}
	if !strings.Contains(p.log.String(), "locked-memory limit raised") {
		t.Errorf("the log does not say the limit was raised:\n%s", p.log.tail(4<<10))
	}
}
