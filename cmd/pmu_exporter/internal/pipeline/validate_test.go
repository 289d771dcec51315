package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/collectors/selftest"
	"github.com/pmu-exporter/pmu_exporter/host"
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
