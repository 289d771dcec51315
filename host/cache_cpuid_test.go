package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
)

// dumpCPUID answers CPUID from a `cpuid -1 -r` dump (testdata/cpuid).
func dumpCPUID(t *testing.T, name string) CPUIDFunc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cpuid", name))
	if err != nil {
		t.Fatal(err)
	}
	return hostgate.ParseCPUID(string(b)).Get
}

// The caches CPUID describes, by hand from the registers: this project's
// EPYC guest with TOPOEXT (0x8000001D: L1d 12 ways × 64 B × 64 sets, L2
// 16 × 64 × 1024, L3 16 × 64 × 32768, sharing known); the same guest
// without TOPOEXT, as the guest whose sysfs has no caches
// (0x80000005 ECX[31:24] = 0x30: L1d 48 KiB; 0x80000006 ECX[31:16] =
// 0x400: L2 1024 KiB; its L3 field, EDX[31:18] = 0x300 × 512 KiB = 384
// MiB, where sysfs and 0x8000001D say 32 MiB, is not used); an Intel leaf 4 (L1d
// 8 × 64 × 64, L3 11 × 64 × 49152); and no CPUID.
func TestDecodeCPUIDCaches(t *testing.T) {
	for _, c := range []struct {
		file, vendor      string
		l1d, l2, llc      uint64
		level             int
		sharing           bool
		source, untrusted string
	}{
		{"amd-epyc-topoext.cpuid", "AuthenticAMD", 48 << 10, 1 << 20, 32 << 20, 3, true, "CPUID leaf 0x8000001d", ""},
		{"amd-epyc-no-topoext.cpuid", "AuthenticAMD", 48 << 10, 1 << 20, 0, 3, false, "legacy leaves", "L3 393216 KiB"},
		{"intel-leaf4.cpuid", "GenuineIntel", 32 << 10, 1 << 20, 11 * 64 * 49152, 3, true, "CPUID leaf 0x4", ""},
	} {
		f, err := DecodeCPUIDCaches(c.vendor, dumpCPUID(t, c.file))
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if f.L1d != c.l1d || f.L2 != c.l2 || f.LLC != c.llc || f.LLCLevel != c.level || f.Sharing != c.sharing ||
			!strings.Contains(f.Source, c.source) || !strings.Contains(f.Untrusted, c.untrusted) || (c.untrusted == "") != (f.Untrusted == "") {
			t.Errorf("%s: %+v", c.file, f)
		}
	}
	if _, err := DecodeCPUIDCaches("AuthenticAMD", nil); err == nil {
		t.Error("no CPUID: no error")
	}
	if _, err := DecodeCPUIDCaches("ARM", func(uint32, uint32) [4]uint32 { return [4]uint32{} }); err == nil {
		t.Error("an unknown vendor: no error")
	}
}

// Sysfs first; CPUID where sysfs has no cache/ (a fixture tree without
// one), each labelled; neither: an error naming both.
func TestReadCacheFacts(t *testing.T) {
	sysfs := t.TempDir()
	cpuid := func(string) (CacheFacts, error) {
		return CacheFacts{Caches: Caches{L1d: 48 << 10}, Source: "CPUID test"}, nil
	}
	f, err := ReadCacheFacts(sysfs, 0, "AuthenticAMD", cpuid)
	if err != nil || f.Source != "CPUID test" || f.L1d != 48<<10 {
		t.Errorf("no sysfs caches: %+v, %v", f, err)
	}
	if _, err := ReadCacheFacts(sysfs, 0, "AuthenticAMD", nil); err == nil || !strings.Contains(err.Error(), "sysfs") {
		t.Errorf("neither: %v", err)
	}
	idx := filepath.Join(sysfs, "devices", "system", "cpu", "cpu0", "cache", "index0")
	os.MkdirAll(idx, 0o755)
	for name, v := range map[string]string{"level": "1", "type": "Data", "size": "32K", "shared_cpu_list": "0"} {
		os.WriteFile(filepath.Join(idx, name), []byte(v+"\n"), 0o644)
	}
	if f, err := ReadCacheFacts(sysfs, 0, "AuthenticAMD", cpuid); err != nil || f.Source != "sysfs" || f.L1d != 32<<10 || !f.Sharing {
		t.Errorf("sysfs caches: %+v, %v", f, err)
	}
}
