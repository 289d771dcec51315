package collector

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
)

// A self-measurement whose CPU went offline is taken again on a CPU online
// then, chosen afresh; one that failed for another reason, on a CPU still
// online, is not (a sysfs fixture whose online list the test changes).
func TestOnOnlineCPUMeasuresAgainAfterHotplug(t *testing.T) {
	sysfs := t.TempDir()
	online := filepath.Join(sysfs, "devices", "system", "cpu", "online")
	if err := os.MkdirAll(filepath.Dir(online), 0o755); err != nil {
		t.Fatal(err)
	}
	setOnline := func(list string) {
		if err := os.WriteFile(online, []byte(list+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setOnline("0-3")
	var log bytes.Buffer
	b := &build{log: slog.New(slog.NewTextHandler(&log, nil)), s: &setup{}, online: host.NewOnlineCPUsReader(sysfs)}
	defer b.online.Close()

	var tried []int
	cpu, err := b.onOnlineCPU("null-read calibration", lastCPU, func(cpu int) error {
		tried = append(tried, cpu)
		if cpu == 3 {
			setOnline("0-2") // it goes offline as the measurement runs
			return fmt.Errorf("CPU 3: counted 1ms of 400ms: %w", selftest.ErrCPUWentOffline)
		}
		return nil
	})
	if err != nil || cpu != 2 || fmt.Sprint(tried) != "[3 2]" {
		t.Errorf("measured on %v, kept CPU %d, err %v; want CPU 3 then 2", tried, cpu, err)
	}
	if !strings.Contains(log.String(), "its CPU went offline") || !strings.Contains(log.String(), "cpu=3") {
		t.Errorf("log does not say why it measured again:\n%s", log.String())
	}

	// Still listed online while it goes offline (a thread cannot be bound
	// there any more): the next try is on another CPU.
	setOnline("0-3")
	tried = nil
	cpu, err = b.onOnlineCPU("null-read calibration", lastCPU, func(cpu int) error {
		tried = append(tried, cpu)
		if cpu == 3 {
			return fmt.Errorf("CPU 3: bind a thread: %w", selftest.ErrCPUWentOffline)
		}
		return nil
	})
	if err != nil || cpu != 2 || fmt.Sprint(tried) != "[3 2]" {
		t.Errorf("CPU 3 listed online but going offline: measured on %v, kept CPU %d, err %v; want CPU 3 then 2", tried, cpu, err)
	}

	tried = nil
	bad := errors.New("perf_event_open: permission denied")
	_, err = b.onOnlineCPU("read perturbation", lastCPU, func(cpu int) error {
		tried = append(tried, cpu)
		return bad
	})
	if !errors.Is(err, bad) || len(tried) != 1 {
		t.Errorf("an error on a CPU still online: tried %v, err %v; want one try and the error", tried, err)
	}

	tried = nil
	_, err = b.onOnlineCPU("read perturbation", lastCPU, func(cpu int) error {
		tried = append(tried, cpu)
		return fmt.Errorf("CPU %d: %w", cpu, selftest.ErrCPUWentOffline)
	})
	if !errors.Is(err, selftest.ErrCPUWentOffline) || len(tried) != 3 {
		t.Errorf("a CPU going offline every time: tried %v, err %v; want three tries and the error", tried, err)
	}
}

// Where a measurement's CPU went offline, it goes on on the last CPU online
// now among those its event counts on; not where the user chose the CPU,
// the CPU is online and failed otherwise, or no such CPU is online.
func TestCPUMover(t *testing.T) {
	offline := fmt.Errorf("CPU 3: %w", selftest.ErrCPUWentOffline)
	online := func() ([]int, error) { return []int{0, 1, 2, 5}, nil }
	cases := []struct {
		asked, from int
		cpus        []int
		err         error
		to          int
		ok          bool
	}{
		{-1, 3, nil, offline, 5, true},
		{-1, 3, []int{0, 1, 2, 3}, offline, 2, true}, // a hybrid's core type
		{-1, 3, []int{3, 4}, offline, 0, false},
		{3, 3, nil, offline, 0, false},
		{-1, 1, nil, errors.New("EACCES"), 0, false}, // online: its own failure
		{-1, 3, nil, errors.New("EACCES"), 5, true},  // offline now
		{-1, 1, nil, unix.ENODEV, 5, true},
		// Still listed online while it goes offline: another CPU.
		{-1, 5, nil, fmt.Errorf("CPU 5: %w", selftest.ErrCPUWentOffline), 2, true},
		{-1, 5, []int{5}, fmt.Errorf("CPU 5: %w", selftest.ErrCPUWentOffline), 5, true}, // the only one it counts on
	}
	for _, c := range cases {
		var said []int
		m := cpuMover{online: online, asked: c.asked, say: func(_ string, from, to int, _ error) { said = append(said, from, to) }}
		to, ok := m.move("task-clock", c.from, c.cpus, c.err)
		if to != c.to || ok != c.ok || (ok && (len(said) != 2 || said[0] != c.from || said[1] != to)) || (!ok && said != nil) {
			t.Errorf("asked %d, from CPU %d, cpus %v, err %v: moved to %d %v (said %v), want %d %v", c.asked, c.from, c.cpus, c.err, to, ok, said, c.to, c.ok)
		}
	}
}

// validate and check agree: on a host whose capability probe found that
// watchpoints do not fire (a guest the debug registers do not reach), the
// breakpoint is validated as not_measurable with the probe's reason, and
// where they fire it is measured; a fixture host, so both kinds are judged
// on any machine.
func TestValidationEventsFollowTheBreakpointProbe(t *testing.T) {
	for _, fire := range []bool{false, true} {
		f, s := fixtureSetup(t, fixture.AMDZen3())
		bp := capability.Feature{Name: capability.Breakpoints, Available: fire}
		if !fire {
			bp.Reason = "a write watchpoint opened but counted 0 of 1000 writes: the debug registers do not reach this machine"
		}
		s.report.Features = append(s.report.Features, bp)
		events, errs := validationEvents(f, s, nil, nil, 0)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		i := slices.IndexFunc(events, func(e validationEvent) bool { return e.Name == "breakpoint" })
		if i < 0 {
			t.Fatalf("fire %v: no breakpoint among %d events", fire, len(events))
		}
		got := events[i].Unmeasurable
		if fire && got != "" || !fire && !strings.Contains(got, bp.Reason) {
			t.Errorf("watchpoints fire %v: breakpoint's unmeasurable reason %q", fire, got)
		}
	}
}
