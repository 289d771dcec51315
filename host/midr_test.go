package host

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func writeMIDR(t *testing.T, root string, cpu, value string) {
	t.Helper()
	dir := filepath.Join(root, "devices", "system", "cpu", cpu, "regs", "identification")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "midr_el1"), []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Each CPU's MIDR as the kernel writes it (a big.LITTLE machine: two
// cores of each kind); a value that is not a number is an error naming
// its file; on this machine, one per CPU on arm64 and none elsewhere.
func TestMIDRs(t *testing.T) {
	root := t.TempDir()
	for cpu, v := range map[string]string{"cpu0": "0x00000000410fd0c1\n", "cpu1": "0x00000000410fd0c1\n", "cpu2": "0x00000000410fd083\n", "cpu3": "0x00000000410fd083\n"} {
		writeMIDR(t, root, cpu, v)
	}
	got, err := MIDRs(root)
	if err != nil || len(got) != 4 || got[0] != 0x410fd0c1 || got[1] != 0x410fd0c1 || got[2] != 0x410fd083 || got[3] != 0x410fd083 {
		t.Fatalf("MIDRs %x, %v", got, err)
	}
	writeMIDR(t, root, "cpu7", "N/A\n")
	if _, err := MIDRs(root); err == nil || !strings.Contains(err.Error(), "cpu7") {
		t.Errorf("a bad MIDR: %v", err)
	}
	here, err := MIDRs("/sys")
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOARCH == "arm64" && len(here) == 0 || runtime.GOARCH != "arm64" && len(here) != 0 {
		t.Errorf("%s: MIDRs %x", runtime.GOARCH, here)
	}
}
