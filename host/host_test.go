package host

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/fixture"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// The fixtures' cpuinfo is x86's, which procfs parses only in an x86-64
// build (it picks its parser by GOARCH); the rest is read on any.
func TestReadFixtureHosts(t *testing.T) {
	x86 := runtime.GOARCH == "amd64"
	sys, proc := fixture.Write(t, fixture.IntelIcelake())
	f := Read(proc, sys)
	if x86 && (f.CPU.Vendor != "GenuineIntel" || f.CPU.Family != "6" || f.CPU.Model != "106" || f.CPU.Stepping != "6" || !f.CPU.Hypervisor) {
		t.Errorf("cpu = %+v", f.CPU)
	}
	if !f.ParanoidKnown || f.Paranoid != 2 || f.MaxSampleRate != 100000 || f.NMIWatchdog {
		t.Errorf("kernel settings = %+v", f)
	}
	if len(f.OnlineCPUs) != 4 {
		t.Errorf("online = %v", f.OnlineCPUs)
	}
	sys, proc = fixture.Write(t, fixture.AMDZen3())
	if f := Read(proc, sys); x86 && (f.CPU.Vendor != "AuthenticAMD" || f.CPU.Family != "25" || f.CPU.Hypervisor) {
		t.Errorf("AMD cpu = %+v", f.CPU)
	}
}

func TestReadReportsWhatIsMissing(t *testing.T) {
	sys, proc := fixture.Write(t, fixture.Host{"proc/cpuinfo": "processor\t: 0\n\n", "sys/x": ""})
	f := Read(proc, sys)
	if f.ParanoidKnown || len(f.Errors) == 0 {
		t.Errorf("missing files produced no errors: %+v", f)
	}
}

// TestReadThisHost compares with what other interfaces say about the same host.
func TestReadThisHost(t *testing.T) {
	// The CPUs this process may run on, asked now (runtime.NumCPU is
	// from its start, when another process may have held one offline).
	var f Facts
	var usable int
	// As we read the kernel, sched_getaffinity leaves out CPUs that are
	// online but not active (a CPU is online before it is active, and
	// inactive before it is offline), so the two may disagree for a moment
	// during another process's hotplug: read them again then.
	for try := 0; try == 0 || len(f.OnlineCPUs) != usable && try < 50; try++ {
		if try > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		testenv.EveryCPUOnline(t, func() { f, usable = Read("/proc", "/sys"), affinityCPUs(t) })
	}
	if len(f.OnlineCPUs) != usable {
		t.Errorf("online CPUs %v, sched_getaffinity %d", f.OnlineCPUs, usable)
	}
	if got := testenv.Cgroup2Mount(); f.Cgroup2Mount != got {
		t.Errorf("cgroup2 mount %q, mountinfo says %q", f.Cgroup2Mount, got)
	}
	if os.Geteuid() == 0 && !f.HasCap(CapSysAdmin) {
		t.Errorf("root without CAP_SYS_ADMIN? CapEff=%#x", f.CapEff)
	}
	if runtime.GOARCH == "amd64" {
		// The vendor string is CPUID leaf 0's EBX, EDX, ECX.
		r := cpuidFunc(0, 0)
		var b [12]byte
		binary.LittleEndian.PutUint32(b[0:], r[1])
		binary.LittleEndian.PutUint32(b[4:], r[3])
		binary.LittleEndian.PutUint32(b[8:], r[2])
		if string(b[:]) != f.CPU.Vendor {
			t.Errorf("CPUID vendor %q, /proc/cpuinfo %q", b, f.CPU.Vendor)
		}
	}
}

// regs answers CPUID from a table of documented register values.
func regs(m map[uint32][4]uint32) CPUIDFunc {
	return func(leaf, _ uint32) [4]uint32 { return m[leaf] }
}

func TestDecodeCounters(t *testing.T) {
	cases := []struct {
		name   string
		vendor string
		regs   map[uint32][4]uint32
		gp, fx int
		known  bool
	}{
		// Skylake with HT: version 4, 4 GP counters of 48 bits; 3 fixed of 48 bits.
		{"skylake", "GenuineIntel", map[uint32][4]uint32{0: {0x16}, 0xA: {0x07300404, 0, 0, 0x00000603}}, 4, 3, true},
		// Icelake server: 8 GP counters, 4 fixed (fixed counter 3 = slots).
		{"icelake", "GenuineIntel", map[uint32][4]uint32{0: {0x1b}, 0xA: {0x08300805, 0, 0, 0x00008604}}, 8, 4, true},
		// A VM whose hypervisor masks leaf 0xA: version 0.
		{"intel-vm", "GenuineIntel", map[uint32][4]uint32{0: {0x16}, 0xA: {0, 0, 0, 0}}, 0, 0, false},
		// Zen 4: PerfMonV2, NumPerfCtrCore = 6, LbrV2StackSz = 16, NumPerfCtrNB = 16.
		{"zen4", "AuthenticAMD", map[uint32][4]uint32{0x80000000: {0x80000028}, 0x80000022: {0x7, 0x4106}}, 6, 0, true},
		// Zen 2: no leaf 0x80000022, PerfCtrExtCore set.
		{"zen2", "AuthenticAMD", map[uint32][4]uint32{0x80000000: {0x8000001f}, 0x80000001: {0, 0, 1 << 23}}, 6, 0, true},
		{"amd-vm", "AuthenticAMD", map[uint32][4]uint32{0x80000000: {0x80000021}, 0x80000001: {0, 0, 0}}, 0, 0, false},
		{"arm", "0x41", nil, 0, 0, false},
	}
	for _, c := range cases {
		got := DecodeCounters(c.vendor, regs(c.regs))
		if got.GeneralPurpose != c.gp || got.Fixed != c.fx || got.Known != c.known || got.Source == "" {
			t.Errorf("%s: %+v, want gp=%d fixed=%d known=%v", c.name, got, c.gp, c.fx, c.known)
		}
	}
	if DecodeCounters("GenuineIntel", nil).Known {
		t.Error("no CPUID but counters known")
	}
}

func TestOnlineCPUsReaderFollowsChanges(t *testing.T) {
	sys, _ := fixture.Write(t, fixture.NoPMU())
	r := NewOnlineCPUsReader(sys)
	defer r.Close()
	if got, err := r.Read(); err != nil || len(got) != 2 {
		t.Fatalf("Read = %v, %v", got, err)
	}
	path := sys + "/devices/system/cpu/online"
	os.WriteFile(path, []byte("0,2-3\n"), 0o644) // rewritten in place, as sysfs regenerates it
	if got, err := r.Read(); err != nil || len(got) != 3 || got[2] != 3 {
		t.Errorf("after change Read = %v, %v", got, err)
	}
	os.WriteFile(path, []byte("garbage\n"), 0o644)
	if _, err := r.Read(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("malformed list: %v", err)
	}
	real := NewOnlineCPUsReader("/sys")
	defer real.Close()
	for i := 0; i < 2; i++ { // the second read goes through the cached path
		var got []int
		var err error
		var usable int
		testenv.EveryCPUOnline(t, func() { got, err = real.Read(); usable = affinityCPUs(t) })
		if err != nil || len(got) != usable {
			t.Errorf("live read %d = %v, %v; sched_getaffinity %d", i, got, err, usable)
		}
	}
}

// affinityCPUs is how many CPUs this thread may run on now.
func affinityCPUs(t *testing.T) int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set.Count()
}

// HoldsCap agrees with the CapEff line of this process's status, read
// here by hand, for every capability.
func TestHoldsCap(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var eff uint64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			if eff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c := uint(0); c < 41; c++ {
		if got, want := HoldsCap("/proc", c), eff&(1<<c) != 0; got != want {
			t.Errorf("capability %d: HoldsCap %v, CapEff %#x says %v", c, got, eff, want)
		}
	}
	if HoldsCap("/nonexistent", CapSysAdmin) {
		t.Error("a procfs that is not there holds a capability")
	}
}
