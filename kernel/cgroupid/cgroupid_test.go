package cgroupid

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// handleID is the cgroup id as the kernel encodes it in a cgroupfs file
// handle (name_to_handle_at): independent of the inode number Walk reads.
func handleID(t *testing.T, dir string) uint64 {
	t.Helper()
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err != nil {
		t.Fatalf("name_to_handle_at %s: %v", dir, err)
	}
	if len(h.Bytes()) != 8 {
		t.Fatalf("cgroupfs handle of %d bytes, want 8", len(h.Bytes()))
	}
	return binary.NativeEndian.Uint64(h.Bytes())
}

func TestWalkResolvesKernelIDs(t *testing.T) {
	top, dirs := testenv.Cgroups(t, "kubepods.slice", "kubepods.slice/pod.slice", "kubepods.slice/pod.slice/c.scope")
	r := New(testenv.Cgroup2Mount())
	if err := r.Walk(); err != nil {
		t.Fatal(err)
	}
	rels := []string{"/kubepods.slice", "/kubepods.slice/pod.slice", "/kubepods.slice/pod.slice/c.scope"}
	for i, d := range dirs {
		id := handleID(t, d)
		if got, ok := r.Path(id); !ok || got != top+rels[i] {
			t.Errorf("Path(%d) = %q, %v; want %q", id, got, ok, top+rels[i])
		}
		if got, err := ID(d); err != nil || got != id {
			t.Errorf("ID(%s) = %d, %v; the kernel's handle says %d", d, got, err, id)
		}
	}
	if got, ok := r.Path(handleID(t, testenv.Cgroup2Mount())); !ok || got != "/" {
		t.Errorf("the root resolves to %q, %v; want /", got, ok)
	}
	// Our own cgroup, as /proc/self/cgroup names it.
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if own, ok := strings.CutPrefix(line, "0::"); ok {
			id := handleID(t, filepath.Join(testenv.Cgroup2Mount(), own))
			if got, _ := r.Path(id); got != own {
				t.Errorf("own cgroup %d resolves to %q; /proc/self/cgroup says %q", id, got, own)
			}
		}
	}

	// A removed cgroup is gone after the next walk; the others stay.
	removed := handleID(t, dirs[2])
	if err := os.Remove(dirs[2]); err != nil {
		t.Fatal(err)
	}
	if err := r.Walk(); err != nil {
		t.Fatal(err)
	}
	if p, ok := r.Path(removed); ok {
		t.Errorf("removed cgroup still resolves to %q", p)
	}
	if _, ok := r.Path(handleID(t, dirs[1])); !ok {
		t.Error("its parent no longer resolves")
	}
}

func TestWalkUnreadableRootKeepsTable(t *testing.T) {
	dir := t.TempDir()
	r := New(dir)
	if err := r.Walk(); err != nil {
		t.Fatal(err)
	}
	before := r.Len()
	if before != 1 {
		t.Fatalf("a directory alone: %d entries, want 1", before)
	}
	r.root = filepath.Join(dir, "missing")
	err := r.Walk()
	if err == nil {
		t.Fatal("walking a missing root succeeded")
	}
	if r.Len() != before {
		t.Errorf("a failed walk changed the table: %d entries, had %d", r.Len(), before)
	}
	if _, err := ID(filepath.Join(dir, "missing")); err == nil {
		t.Error("ID of a missing directory succeeded")
	}
}

// BenchmarkWalk walks this machine's cgroup v2 hierarchy, as the attributor
// does every 10 s (to find removed cgroups) and when an unknown one appears.
func BenchmarkWalk(b *testing.B) {
	root := testenv.Cgroup2Mount()
	testenv.Require(b, root != "", "needs cgroup v2")
	r := New(root)
	for b.Loop() {
		if err := r.Walk(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.Len()), "cgroups")
}

// Check drops a removed cgroup and one replaced by a new cgroup of the same
// name (a new kernel id), keeps the others, and learns no new cgroup: that
// takes a walk.
func TestCheckDropsRemoved(t *testing.T) {
	top, dirs := testenv.Cgroups(t, "a", "b", "c")
	r := New(testenv.Cgroup2Mount())
	if err := r.Walk(); err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(dirs))
	for i, d := range dirs {
		ids[i] = handleID(t, d)
	}
	if err := os.Remove(dirs[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dirs[1]); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dirs[1], 0o755); err != nil {
		t.Fatal(err)
	}
	renewed := handleID(t, dirs[1])
	if renewed == ids[1] {
		t.Fatal("the kernel reused a cgroup id")
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true} {
		if _, ok := r.Path(ids[i]); ok != want {
			t.Errorf("%s (id %d): resolves %v after the check, want %v", dirs[i], ids[i], ok, want)
		}
	}
	if p, _ := r.Path(ids[2]); p != top+"/c" {
		t.Errorf("the kept cgroup resolves to %q, want %q", p, top+"/c")
	}
	if _, ok := r.Path(renewed); ok {
		t.Error("a check found a new cgroup; only a walk does")
	}
	if err := r.Walk(); err != nil {
		t.Fatal(err)
	}
	if p, ok := r.Path(renewed); !ok || p != top+"/b" {
		t.Errorf("after a walk the new cgroup resolves to %q, %v", p, ok)
	}
}

// BenchmarkCheck checks this machine's cgroups, beside BenchmarkWalk.
func BenchmarkCheck(b *testing.B) {
	root := testenv.Cgroup2Mount()
	testenv.Require(b, root != "", "needs cgroup v2")
	r := New(root)
	if err := r.Walk(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := r.Check(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.Len()), "cgroups")
}
