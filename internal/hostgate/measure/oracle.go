package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
)

// tools runs the oracles: Debian's perf and cpuid, where installed.
type tools struct {
	perf, cpuidTool string
	absent          []string
}

func newTools() *tools {
	t := &tools{}
	t.perf = t.look("perf")
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "386" {
		t.cpuidTool = t.look("cpuid")
	}
	return t
}

func (t *tools) look(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.absent = append(t.absent, name)
		return ""
	}
	return p
}

// missing names the oracles this host should have and lacks.
func (t *tools) missing() []string { return t.absent }

// perfStat runs perf stat -x, with events on args and returns each event's
// count as perf printed it ("<not supported>", "<not counted>" or digits).
func (t *tools) perfStat(events string, args ...string) (map[string]string, error) {
	out, err := exec.Command(t.perf, append([]string{"stat", "-x,", "-e", events, "--"}, args...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("perf stat -e %s: %v: %s", events, err, strings.TrimSpace(string(out)))
	}
	return parsePerfStatCSV(string(out)), nil
}

// parsePerfStatCSV reads perf stat -x, lines: value,unit,event,... ; other
// lines (the command's own output) are passed over.
func parsePerfStatCSV(out string) map[string]string {
	counts := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || f[2] == "" {
			continue
		}
		counts[f[2]] = f[0]
	}
	return counts
}

// hardwareCounting: perf stat counts instructions or cycles of true
// (QEMU's emulated arm64 counts cycles, instructions only with -icount).
func (t *tools) hardwareCounting() hostgate.Finding {
	if t.perf == "" {
		return hostgate.Finding{Proof: "perf is not installed"}
	}
	c, err := t.perfStat("instructions,cycles", "true")
	if err != nil {
		return hostgate.Finding{Proof: err.Error()}
	}
	proof := fmt.Sprintf("perf stat -e instructions,cycles true: %s, %s", c["instructions"], c["cycles"])
	counted := func(v string) bool { n, err := strconv.ParseUint(v, 10, 64); return err == nil && n > 0 }
	return hostgate.Finding{Known: true, Present: counted(c["instructions"]) || counted(c["cycles"]), Proof: proof}
}

// preciseSampling: perf mem record opens the host's precise memory
// sampler (PEBS mem-loads, IBS op, Arm SPE), or says it has none.
func (t *tools) preciseSampling() hostgate.Finding {
	if t.perf == "" {
		return hostgate.Finding{Proof: "perf is not installed"}
	}
	dir, err := os.MkdirTemp("", "hostgate")
	if err != nil {
		return hostgate.Finding{Proof: err.Error()}
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command(t.perf, "mem", "record", "-o", filepath.Join(dir, "perf.data"), "--", "true").CombinedOutput()
	if err != nil {
		return hostgate.Finding{Known: true, Proof: fmt.Sprintf("perf mem record: %s", firstLine(string(out)))}
	}
	return hostgate.Finding{Known: true, Present: true, Proof: "perf mem record opened its memory events"}
}

// watchWrites is how many stores the watchpoint oracle watches.
const watchWrites = 1000

// watchpoints: perf stat counts a write watchpoint (mem:ADDR:w) on this
// program's own global while a child run of it stores there 1,000 times.
func (t *tools) watchpoints() hostgate.Finding {
	if t.perf == "" {
		return hostgate.Finding{Proof: "perf is not installed"}
	}
	self, err := os.Executable()
	if err != nil {
		return hostgate.Finding{Proof: err.Error()}
	}
	addr := addrOfWatched()
	ev := fmt.Sprintf("mem:%#x/8:w", addr)
	out, err := exec.Command(t.perf, "stat", "-x,", "-e", ev, "--", self, "write", strconv.Itoa(watchWrites)).CombinedOutput()
	if err != nil {
		return hostgate.Finding{Proof: fmt.Sprintf("perf stat -e %s: %v: %s", ev, err, firstLine(string(out)))}
	}
	lines := strings.SplitN(string(out), "\n", 2)
	if got := strings.TrimSpace(lines[0]); got != fmt.Sprintf("%#x", addr) {
		return hostgate.Finding{Proof: fmt.Sprintf("the child stored at %s, not at %#x: a position-independent build?", got, addr)}
	}
	var count string
	for e, v := range parsePerfStatCSV(string(out)) {
		if strings.HasPrefix(e, "mem:") {
			count = v
		}
	}
	proof := fmt.Sprintf("perf stat -e %s counted %s of %d stores", ev, count, watchWrites)
	n, err := strconv.Atoi(count)
	if err != nil { // <not supported>, <not counted>
		return hostgate.Finding{Known: true, Proof: proof}
	}
	// Firing, as the exporter's probe judges it: 99% of the stores at
	// least (QEMU's TCG loses one in a thousand now and then).
	return hostgate.Finding{Known: true, Present: n >= watchWrites*99/100, Proof: proof}
}

// cpuid reads every leaf through the cpuid tool (cpuid -1 -r), or none
// where there is no tool (not x86, or not installed).
func (t *tools) cpuid() cpuidLeaves {
	if t.cpuidTool == "" {
		return cpuidLeaves{}
	}
	out, err := exec.Command(t.cpuidTool, "-1", "-r").Output()
	if err != nil {
		return cpuidLeaves{}
	}
	return parseCPUID(string(out))
}

// cpuidLeaves are the dumped registers (hostgate.ParseCPUID).
type cpuidLeaves struct{ hostgate.CPUIDLeaves }

func parseCPUID(out string) cpuidLeaves { return cpuidLeaves{hostgate.ParseCPUID(out)} }

func (l cpuidLeaves) get(leaf, sub uint32) [4]uint32 { return l.Get(leaf, sub) }

// vendor is leaf 0's vendor string.
func (l cpuidLeaves) vendor() string {
	r := l.get(0, 0)
	b := make([]byte, 0, 12)
	for _, w := range []uint32{r[1], r[3], r[2]} {
		b = append(b, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	return string(b)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
