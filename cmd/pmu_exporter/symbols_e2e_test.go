package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/hugeelf"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// A process runs a binary whose section headers declare a 512 MiB symbol
// table (sparse: a few KB of disk), and the exporter at its defaults but
// for --collector.comm.symbol-cache=16MiB samples it: the exporter's peak
// resident memory (the kernel's VmHWM) grows by less than that budget over
// the run, and the table is refused and counted. Without its symbols the
// decoder knows no function start to find the instruction before a sampled
// IP from, so most of its samples end unresolved (counted by reason).
// Before the budget, a 16 KB file of this kind took the exporter from 50
// to 752 MB.
func TestHugeSymbolTableWithinBudget(t *testing.T) {
	requireDecoder(t) // amd64 and arm64: little-endian ELF64, as hugeelf patches
	testenv.RequireRoot(t)
	gcc := testenv.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "cetshare")
	if out, err := exec.Command(gcc, "-O2", "-pthread", "-o", bin, "testdata/cetshare.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	huge := hugeelf.Declare(t, bin, ".symtab", 512<<20)
	const budget = 16 << 20
	top, dirs := testenv.Cgroups(t, "job")
	p := start(t, nil, "--collector.comm.period=200000", "--collector.comm.cpu-budget=0.2",
		"--collector.comm.symbol-cache=16MiB", "--collector.comm.cgroup="+top+"/job")
	p.scrape(t)
	hwm0 := peakRSS(t, p.cmd.Process.Pid)
	cg, err := os.Open(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(huge, "3")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", huge, err, out)
	}
	_, mfs := p.scrape(t)
	hwm1 := peakRSS(t, p.cmd.Process.Pid)
	refused := mustValue(t, mfs, "pmu_address_symbol_tables_refused_total", nil)
	held := mustValue(t, mfs, "pmu_address_symbol_cache_bytes", nil)
	outcomes := map[string]float64{}
	for _, m := range mfs["pmu_address_samples_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			outcomes[l.GetValue()] += m.GetCounter().GetValue()
		}
	}
	t.Logf("peak RSS %d -> %d KiB; %v tables refused, %v bytes held; samples by outcome %v", hwm0>>10, hwm1>>10, refused, held, outcomes)
	if hwm1-hwm0 > budget {
		t.Errorf("the exporter's peak RSS grew by %d KiB, over the %d KiB symbol budget", (hwm1-hwm0)>>10, budget>>10)
	}
	if refused < 1 || held > budget {
		t.Errorf("%v tables refused, %v bytes held: want the 512 MiB table refused within %d", refused, held, budget)
	}
}

// peakRSS is pid's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
