package perf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
	"github.com/pmu-exporter/pmu_exporter/model"
)

// TestMain doubles as helper processes: a CPU spinner and an unprivileged opener.
func TestMain(m *testing.M) {
	switch os.Getenv("PERF_TEST_HELPER") {
	case "spin":
		var b [1]byte
		os.Stdin.Read(b[:]) // wait until the parent has placed us in the cgroup
		d, _ := time.ParseDuration(os.Getenv("PERF_TEST_SPIN"))
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		start := ts.Nano()
		for time.Duration(ts.Nano()-start) < d {
			unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		}
		// The process's CPU time spent inside the cgroup, as the kernel accounts it.
		fmt.Print(ts.Nano() - start)
		os.Exit(0)
	case "open-system-wide":
		_, err := OpenGroup([]eventspec.Attr{{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}}, []string{"cpu-clock"}, SystemWide(0))
		var oe *model.OpenError
		if errors.As(err, &oe) {
			fmt.Print(oe.Reason)
		} else {
			fmt.Printf("unexpected: %v", err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var swGroup = []eventspec.Attr{
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK},
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK},
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS},
	{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
}
var swNames = []string{"cpu-clock", "task-clock", "page-faults", "context-switches"}

func TestOpenErrorsAreClassified(t *testing.T) {
	// An event number past PERF_COUNT_SW_MAX does not exist on any kernel.
	_, err := OpenGroup([]eventspec.Attr{{Type: unix.PERF_TYPE_SOFTWARE, Config: 9999}}, []string{"bogus"}, SystemWide(0))
	var oe *model.OpenError
	if !errors.As(err, &oe) || oe.Reason != model.ReasonUnsupported || oe.Event != "bogus" || !strings.Contains(err.Error(), "opening bogus on CPU 0") {
		t.Errorf("unknown software event: %v", err)
	}
	// A member that cannot be opened closes the whole group and names the member.
	_, err = OpenGroup([]eventspec.Attr{swGroup[0], {Type: 4242, Config: 1}}, []string{"cpu-clock", "no-such-pmu"}, SystemWide(0))
	if !errors.As(err, &oe) || oe.Event != "no-such-pmu" {
		t.Errorf("bad member: %v", err)
	}
}

func TestOpenErrorFDLimit(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	lim := old
	lim.Cur = 256
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Fill every free descriptor slot, then free exactly two: a group of four
	// events must then fail on its third.
	var held []int
	defer func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	}()
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	for _, fd := range held[len(held)-2:] {
		unix.Close(fd)
	}
	held = held[:len(held)-2]
	_, err := OpenGroup(swGroup, swNames, SystemWide(0))
	var oe *model.OpenError
	if !errors.As(err, &oe) || oe.Reason != model.ReasonFDLimit || oe.Event != swNames[2] || !strings.Contains(oe.Fix(), "ulimit -n") {
		t.Errorf("err = %v, want fd_limit on %s", err, swNames[2])
	}
}

// TestOpenErrorPermission runs the system-wide open as an unprivileged user.
func TestOpenErrorPermission(t *testing.T) {
	testenv.RequireRoot(t)
	b, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	paranoid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testenv.Require(t, paranoid >= 1, "perf_event_paranoid < 1 lets anyone count system-wide")
	// The unprivileged user cannot enter go test's private build directory, so run
	// a world-readable copy of this test binary.
	dir, err := os.MkdirTemp("", "pmu-perm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "perf.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "PERF_TEST_HELPER=open-system-wide")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(model.ReasonPermission) {
		t.Errorf("unprivileged system-wide open: %q, want %q", out, model.ReasonPermission)
	}
}

func TestProbes(t *testing.T) {
	if err := Probe(eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK}); err != nil {
		t.Errorf("task-clock probe: %v", err)
	}
	if err := Probe(eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: 9999}); err == nil {
		t.Error("probe of a nonexistent event succeeded")
	}
	// Every x86-64 and arm64 Linux has debug registers, but not every
	// guest gets them: the probe must find what perf's mem: event finds
	// (internal/hostgate).
	err := ProbeBreakpoint()
	if fire := testenv.HasFeature(t, hostgate.Watchpoints); fire != (err == nil) {
		t.Errorf("breakpoint probe: %v, where perf finds watchpoints firing: %v", err, fire)
	}
}

// A CPU going offline breaks its groups up, each member keeping its
// counts: Read then fails with ErrGroupBroken, and ReadMembers reads what
// the group counted up to the offline, cpu-clock the wall time from the
// open to the offline write. Another process toggling the CPU meanwhile
// makes the round run again.
func TestReadMembersAfterOffline(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	vals := make([]uint64, len(swGroup))
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatalf("CPU %d went offline before the test took it offline in %d rounds", cpu, round)
		}
		testenv.AwaitPresentOnline(t, 5*time.Second)
		opening := time.Now()
		g, err := OpenGroup(swGroup, swNames, SystemWide(cpu))
		if errors.Is(err, unix.ENODEV) {
			t.Logf("round %d: CPU %d went offline before the open (another process): again", round, cpu)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		opened := time.Now()
		time.Sleep(200 * time.Millisecond)
		offlining := time.Now()
		if err := os.WriteFile(ctl, []byte("0"), 0o644); err != nil {
			g.Close()
			t.Fatal(err)
		}
		offline := time.Now()
		_, _, rerr := g.Read(vals)
		enabled, _, err := g.ReadMembers(vals)
		g.Close()
		if err := os.WriteFile(ctl, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(rerr, ErrGroupBroken) {
			t.Fatalf("Read after CPU %d went offline: %v, want ErrGroupBroken", cpu, rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Counted up to the offline: at most from before the open to after
		// the write; at least 95% from after the open to before it (less
		// where another process took the CPU offline first: again).
		most, least := offline.Sub(opening), offlining.Sub(opened)
		if c := time.Duration(vals[0]); c < least*95/100 {
			t.Logf("round %d: cpu-clock %v, less than the %v to the offline (another process's hotplug?): again", round, c, least)
			continue
		} else if c > most || time.Duration(enabled) > most || time.Duration(enabled) < least*95/100 {
			t.Errorf("cpu-clock %v, time_enabled %v; the CPU was online %v to %v", c, time.Duration(enabled), least, most)
		}
		return
	}
}
