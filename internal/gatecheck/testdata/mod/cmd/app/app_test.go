package main

import (
	"testing"

	"example.com/mod/internal/hostgate"
	"example.com/mod/internal/testenv"
)

type proc struct{}

func (proc) withReuse() []string { return []string{"--collector.comm.reuse"} }

func start(flags ...string) {}

// Found: the flag, through a helper.
func TestUngatedThroughHelper(t *testing.T) { startReuse() }

func startReuse() { start("--collector.comm.watchpoints") }

// Found: the flag, through a method.
func TestUngatedThroughMethod(t *testing.T) { start(proc{}.withReuse()...) }

// Not found: gated in a helper.
func TestGatedInHelper(t *testing.T) { requireTraps(t); startReuse() }

func requireTraps(t *testing.T) { testenv.RequireFeature(t, hostgate.Watchpoints) }

// Not found: follows the verdict.
func TestFollows(t *testing.T) {
	if testenv.HasFeature(t, hostgate.Watchpoints) {
		start("--collector.comm.reuse=true")
	}
}

// Not found: another flag of the same prefix.
func TestOtherFlag(t *testing.T) { start("--collector.comm.reuse-mode=shared") }

// Found: takes a CPU offline, gated only on watchpoints.
func TestHotplugUngated(t *testing.T) {
	testenv.RequireFeature(t, hostgate.Watchpoints)
	_ = "/sys/devices/system/cpu/cpu1/online"
}

// Not found: testenv.HotplugCPU gates on hotplug through its helper.
func TestHotplugGated(t *testing.T) {
	testenv.HotplugCPU(t)
	_ = "/sys/devices/system/cpu/cpu1/online"
}

// Not a test: a helper named like one, with another signature.
func TestdataHelper(n int) { start("--collector.comm.reuse") }
