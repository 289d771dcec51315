package replay

import (
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/plan/platform"
)

// After both intervals of the hand-made recording, worked out by hand:
// package 0 (CPU 0) used 10.25+0.50 J, package 1 (CPU 2) 8.50 J (its
// second interval was not counted); the controllers read 1.50+0.50 MiB on
// package 0 and 0.25 MiB on package 1, wrote 0.75 MiB there; the CHA's
// local reads are (1000+24)·64 bytes, the remote 10·64; UPI link 0 sent
// 900 flits of 64/9 bytes, 6400 bytes, and package 1's links (merged)
// received 18, 128 bytes; the MSRs and C6 are the counts summed per CPU;
// cycles is no platform event.
func TestPlatformTotalsByHand(t *testing.T) {
	p := NewPlayer(load(t, "testdata/platform-handmade.csv"), nil, nil)
	p.Step()
	p.Step()
	got := map[string]float64{}
	view := p.Platform()
	if err := view.Read(func(c *platform.Counter, cpu int, count uint64) {
		key := c.Name + "@" + view.PackageOf(cpu)
		if c.Kind == platform.MSR || c.Kind == platform.CoreCState {
			key = c.Name + "@cpu" + string(rune('0'+cpu))
		}
		if c.Locality != "" {
			key = c.Locality + "-" + key
		}
		if c.Kind == platform.UPIBytes {
			key = "upi" + c.Link + "-" + key
		}
		got[key] += float64(count) * c.Scale
	}); err != nil {
		t.Fatal(err)
	}
	const MiB = 1 << 20
	want := map[string]float64{
		"pkg@0": 10.75, "pkg@1": 8.50, "ram@0": 2,
		"read@0": 2 * MiB, "read@1": 0.25 * MiB, "write@1": 0.75 * MiB,
		"local-read@0": 1024 * 64, "remote-read@1": 640, "upi0-transmit@0": 6400, "upi-receive@1": 128,
		"tsc@cpu0": 6e9, "tsc@cpu1": 3e9, "aperf@cpu0": 1.5e9, "mperf@cpu0": 1e9, "c6@cpu1": 2e9,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g < v-1e-6 || g > v+1e-6 {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("counters %v, want %v", got, want)
	}
	events, err := p.rec.PlatformEvents()
	if err != nil || len(events) != 12 {
		t.Errorf("PlatformEvents: %v %v, want the 12 platform events", events, err)
	}
}

// A platform event in a unit perf never prints for it is refused with
// the line that has it.
func TestPlatformEventsRefuseAWrongUnit(t *testing.T) {
	rec, err := Load("bad.csv", strings.NewReader("1.0,CPU0,3.5,msec,power/energy-pkg/,1000,100.00,,\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.PlatformEvents(); err == nil || !strings.Contains(err.Error(), "bad.csv: line 1: event power/energy-pkg/") {
		t.Errorf("err = %v", err)
	}
}

// Zen 4's data fabric, named by encoding and by perf's name, worked out
// by hand: package 0's DRAM read (100+20)·64 bytes for its own
// processors and wrote 10·64 for remote ones (coherent stations 0 and 1);
// package 1's read 7·64 for remote ones (station 2); package 0's xGMI
// link 1 sent 50·64 bytes, package 1's link 0 5·64. perf prints a
// multiplexed count already scaled.
func TestPlatformAMDDataFabricByHand(t *testing.T) {
	p := NewPlayer(load(t, "testdata/platform-amd-handmade.csv"), nil, nil)
	p.Step()
	p.Step()
	got := map[string]float64{}
	view := p.Platform()
	if err := view.Read(func(c *platform.Counter, cpu int, count uint64) {
		key := c.Locality + "-" + c.Name + "@" + view.PackageOf(cpu)
		switch c.Kind {
		case platform.XGMIBytes:
			key = "xgmi" + c.Link + key
		case platform.DRAMBytes:
		default:
			t.Errorf("%s: %v, want DRAM or xGMI bytes", c.Event, c.Kind)
		}
		got[key] += float64(count) * c.Scale
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"local-read@0": 120 * 64, "remote-write@0": 640, "remote-read@1": 448, "xgmi1-transmit@0": 3200, "xgmi0-transmit@1": 320}
	if len(got) != len(want) {
		t.Errorf("counters %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
