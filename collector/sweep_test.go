package collector

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// The minute's sweep forgets a process that exited and closes the file it
// mapped (here a binary removed from disk after it ran, as an image's is
// when the image is collected: an open file keeps its space), and forgets a
// thread that exited in a process that lives on. The kernel's own lists
// are the expectation: /proc/self/fd, /proc/PID and /proc/PID/task.
func TestSweepExitedForgetsProcessesThreadsAndFiles(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sleep-copy")
	copyFile(t, sleep, bin)
	child := exec.Command(bin, "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	cpid := uint32(child.Process.Pid)
	ip := textOf(t, child.Process.Pid, bin)

	dec, err := newDecoder("/proc", comdetect.New(comdetect.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, r := dec.Text(cpid, ip, nil); r != memop.Resolved {
		t.Fatalf("the child's code: %v", r)
	}

	// This process's main thread and one that has exited communicated.
	pid := uint32(os.Getpid())
	tid := testenv.ExitedThread(t)
	dec.View(func(det *comdetect.Detector, _ memop.Outcomes) {
		det.Add(&comdetect.Access{PID: pid, TID: tid, Addr: 0x1000, Size: 8, Store: true, Time: 1, Period: 1})
		det.Add(&comdetect.Access{PID: pid, TID: pid, Addr: 0x1000, Size: 8, Time: 2, Period: 1})
	})

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if !holds(t, bin) {
		t.Fatalf("the decoder never opened %s", bin)
	}

	sweepExited(dec, "/proc")
	if holds(t, bin) {
		t.Errorf("%s is still open after its only process exited", bin)
	}
	dec.View(func(det *comdetect.Detector, _ memop.Outcomes) {
		if slices.Contains(det.PIDs(), cpid) {
			t.Errorf("the child %d is still known after it exited", cpid)
		}
		if got := det.Threads(pid); !slices.Contains(got, pid) || slices.Contains(got, tid) {
			t.Errorf("threads of %d: %v; want %d kept and %d, which exited, forgotten", pid, got, pid, tid)
		}
		if m := det.Report(pid, 1); len(m) != 1 || m[0].Totals.Detections != 1 || len(m[0].Threads) != 0 {
			t.Errorf("report %+v; want the detection in the totals, and no row: its one pair's other thread exited", m)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// textOf is an address in pid's executable mapping of file, once exec has
// mapped it.
func textOf(t *testing.T, pid int, file string) uint64 {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		maps, err := p.ProcMaps()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.Pathname == file && m.Perms.Execute {
				return uint64(m.StartAddr) + 16
			}
		}
	}
	t.Fatalf("%d never mapped %s", pid, file)
	return 0
}

// holds says whether this process has file open (the kernel's fd table;
// a removed file's link reads "PATH (deleted)").
func holds(t *testing.T, file string) bool {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.TrimSuffix(l, " (deleted)") == file {
			return true
		}
	}
	return false
}
