package testenv

import (
	"testing"

	"example.com/mod/internal/hostgate"
)

func RequireFeature(t testing.TB, feature string) {}

func HasFeature(t testing.TB, feature string) bool { return true }

// HotplugCPU gates through a helper of its own.
func HotplugCPU(t testing.TB) int { requireHotplug(t); return 1 }

func requireHotplug(t testing.TB) { RequireFeature(t, hostgate.CPUHotplug) }
