package main

import (
	"os"
	"strings"
	"testing"
)

func leaves(t *testing.T, name string) cpuidLeaves {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return parseCPUID(string(b))
}

// The cache oracle reads the leaves the kernel describes caches from. The
// sizes are ways × partitions × line × sets, computed by hand from the
// registers: this project's AMD EPYC guest (cpuid -1 -r, 0x8000001D:
// L1d 12 × 1 × 64 × 64, L3 16 × 1 × 64 × 32768); the same guest without
// TOPOEXT, as the guest whose sysfs has no caches (cannot tell:
// legacy L1d 0x80000005 ECX[31:24] = 48 KiB only); and an Intel
// leaf 4 (L1d 8 × 64 × 64, L3 11 × 64 × 49152).
func TestCPUIDCaches(t *testing.T) {
	for _, c := range []struct {
		file           string
		present        bool
		l1d, llc       uint64
		level          int
		proof, smtWant string
		smt            bool
	}{
		{"amd-epyc-topoext.cpuid", true, 12 * 64 * 64, 16 * 64 * 32768, 3, "leaf 0x8000001d: L1 48 KiB, L2 1024 KiB, L3 32768 KiB", "leaf 0xB: 1 logical", false},
		{"amd-epyc-no-topoext.cpuid", false, 12 * 64 * 64, 0, 0, "does not advertise TOPOEXT", "leaf 0xB: 1 logical", false},
		{"intel-leaf4.cpuid", true, 8 * 64 * 64, 11 * 64 * 49152, 3, "leaf 0x4: L1 32 KiB, L2 1024 KiB, L3 33792 KiB", "leaf 0xB: 2 logical", true},
	} {
		l := leaves(t, c.file)
		got := cpuidCaches(l)
		// Without TOPOEXT CPUID cannot tell whether the kernel describes
		// caches (legacyCaches), only their L1d.
		if got.known != c.present || got.present != c.present || got.l1d != c.l1d || got.llc != c.llc || got.llcLevel != c.level || !strings.Contains(got.proof, c.proof) {
			t.Errorf("%s: %+v", c.file, got)
		}
		smt := cpuidSMT(l)
		if !smt.Known || smt.Present != c.smt || !strings.Contains(smt.Proof, c.smtWant) {
			t.Errorf("%s: SMT %+v", c.file, smt)
		}
	}
	if c := cpuidCaches(cpuidLeaves{}); c.known {
		t.Errorf("no CPUID: %+v", c)
	}
}

// Both describe caches, of other sizes: a conflict that disputes the gate.
func TestCacheConflict(t *testing.T) {
	sys := caches{known: true, present: true, l1d: 32 << 10, llc: 32 << 20, llcLevel: 3}
	id := cpuidCaches(leaves(t, "amd-epyc-topoext.cpuid"))
	if c := cacheConflict(sys, id); !strings.Contains(c, "L1d 32 KiB") {
		t.Errorf("32 KiB against 48 KiB: %q", c)
	}
	sys.l1d = 48 << 10
	if c := cacheConflict(sys, id); c != "" {
		t.Errorf("the same sizes: %q", c)
	}
	if c := cacheConflict(caches{known: true}, id); c != "" {
		t.Errorf("sysfs has none (a presence dispute, not a conflict): %q", c)
	}
	// The legacy leaves cannot say whether sysfs describes caches, but
	// where it does, its L1d is theirs (QEMU's family 15 under Debian's
	// 6.1: sysfs L1d 64 KiB, as CPUID's legacy leaf).
	legacy := cpuidCaches(leaves(t, "amd-epyc-no-topoext.cpuid"))
	if c := cacheConflict(caches{known: true, present: true, l1d: 48 << 10, llc: 16 << 20, llcLevel: 3}, legacy); c != "" {
		t.Errorf("legacy L1d 48 KiB, sysfs 48 KiB: %q", c)
	}
	if c := cacheConflict(caches{known: true, present: true, l1d: 64 << 10, llc: 16 << 20, llcLevel: 3}, legacy); c == "" {
		t.Error("legacy L1d 48 KiB, sysfs 64 KiB: no conflict")
	}
}

// perf stat -x, as this host's perf 6.x prints it, with and without a
// PMU, and the command's own output mixed in.
func TestParsePerfStatCSV(t *testing.T) {
	out := "0x8f5298\n<not supported>,,instructions,0,100.00,,\n1000,,mem:0x8f5298/8:w,543431,100.00,,\n0.54,msec,task-clock,543431,100.00,0.462,CPUs utilized\n"
	got := parsePerfStatCSV(out)
	for ev, want := range map[string]string{"instructions": "<not supported>", "mem:0x8f5298/8:w": "1000", "task-clock": "0.54"} {
		if got[ev] != want {
			t.Errorf("%s: %q, want %q (all %v)", ev, got[ev], want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("%v", got)
	}
}
