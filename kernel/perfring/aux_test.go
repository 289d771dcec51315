package perfring

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// TestAuxRefusedByEventsWithoutOne: the kernel maps an AUX area only for a
// trace PMU's event; a software event's is refused, and the error says so.
func TestAuxRefusedByEventsWithoutOne(t *testing.T) {
	_, r := openRing(t, 4)
	err := r.MapAux(4)
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("MapAux on a page-fault event: %v, want the kernel's EOPNOTSUPP", err)
	}
	if got := err.Error(); !bytes.Contains([]byte(got), []byte("writes no AUX area")) {
		t.Errorf("error %q does not say why", got)
	}
	if r.AuxSize() != 0 || r.Aux(0, 8) != nil {
		t.Errorf("a refused AUX area is in use: size %d", r.AuxSize())
	}
	if err := r.MapAux(3); err == nil {
		t.Error("an AUX area of 3 pages was accepted")
	}
	if err := r.Close(); err != nil { // the data area still unmaps cleanly
		t.Fatal(err)
	}
}

// fakeAux is a ring whose AUX area and metadata page are ordinary memory,
// laid out as the kernel's: the chunk reading and releasing are pure.
func fakeAux(size int) (*Ring, []byte) {
	meta := new(unix.PerfEventMmapPage)
	aux := make([]byte, size)
	for i := range aux {
		aux[i] = byte(i*7 + 3)
	}
	return &Ring{meta: meta, aux: aux, auxMask: uint64(size - 1)}, aux
}

// TestAuxChunks: a chunk comes back as the bytes at its offset modulo the
// area, whole where it wraps; the tail only moves on.
func TestAuxChunks(t *testing.T) {
	r, aux := fakeAux(64)
	at := func(off, size uint64) []byte { // the area's bytes, wrapping, one by one
		var b []byte
		for i := range size {
			b = append(b, aux[(off+i)%64])
		}
		return b
	}
	for _, c := range []struct{ off, size uint64 }{
		{0, 16}, {16, 48}, {64, 8}, {120, 16}, {127, 64}, {1<<40 + 60, 10}, {5, 0},
	} {
		if got := r.Aux(c.off, c.size); !bytes.Equal(got, at(c.off, c.size)) || len(got) != int(c.size) {
			t.Errorf("Aux(%d, %d) = %v, want %v", c.off, c.size, got, at(c.off, c.size))
		}
	}
	if got := r.Aux(0, 65); got != nil {
		t.Errorf("a chunk larger than the area: %v", got)
	}
	// A view, not a copy, where the chunk does not wrap.
	if v := r.Aux(72, 8); &v[0] != &aux[8] {
		t.Error("an unwrapped chunk was copied")
	}
	for _, c := range []struct{ end, want uint64 }{{16, 16}, {64, 64}, {40, 64}, {200, 200}} {
		r.ReleaseAux(c.end)
		if r.meta.Aux_tail != c.want {
			t.Errorf("ReleaseAux(%d): aux_tail %d, want %d", c.end, r.meta.Aux_tail, c.want)
		}
	}
}

// TestTimeConvAsPerf: the ring's conversion of the CPU's counter to perf's
// clock is what perf record writes into its recording's TIME_CONV, taken
// from the same kernel's metadata page: the same fields where the kernel
// offers one, and none where it does not (under KVM's clock, as on this
// project's VMs: perf then writes no TIME_CONV).
func TestTimeConvAsPerf(t *testing.T) {
	perf := testenv.RequireTool(t, "perf")
	testenv.RequireRoot(t)
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: 1 << 40, Bits: unix.PerfBitDisabled}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatalf("perf_event_open(cpu-clock on CPU 0): %v", err)
	}
	defer unix.Close(fd)
	r, err := Open(fd, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, ok := r.TimeConv()

	out := filepath.Join(t.TempDir(), "perf.data")
	if b, err := exec.Command(perf, "record", "-q", "-C", "0", "-e", "cpu-clock", "-o", out, "--", "sleep", "0.01").CombinedOutput(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf, err := perfdata.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := pf.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	want := pf.TimeConv
	switch {
	case want == nil && ok:
		t.Fatalf("the ring offers a time conversion %+v; perf wrote none", got)
	case want != nil && !ok:
		t.Fatalf("perf wrote TIME_CONV %+v; the ring offers none", *want)
	case want == nil:
		t.Logf("no time conversion on this host, as perf says (capabilities %#x)", r.meta.Capabilities)
		return
	}
	if got.Shift != want.Shift || got.Mult != want.Mult || got.Zero != want.Zero || got.CapUserTimeShort != want.CapUserTimeShort ||
		(got.CapUserTimeShort && (got.Mask != want.Mask || got.Cycles != want.Cycles)) {
		t.Errorf("TimeConv %+v, perf's TIME_CONV %+v", got, *want)
	}
}
