package wpsim

import "testing"

// The registers' semantics, traced by hand.
func TestRegisters(t *testing.T) {
	r := New(2, 1)
	r.Join(1)
	r.Join(2)
	if r.Join(1) {
		t.Error("joined twice")
	}
	r.Arm(1, 0, 0x100, 8, false) // loads and stores, from access 2 on
	r.Arm(2, 1, 0x100, 4, true)  // stores to 4 bytes
	for i, c := range []struct {
		tid   uint32
		write bool
		addr  uint64
		size  uint8
		want  int
	}{
		{1, false, 0x100, 8, -1}, // within the arm delay
		{1, false, 0x104, 4, 0},  // overlaps the last 4 watched bytes
		{2, false, 0x100, 8, -1}, // a load: register 1 watches stores
		{2, true, 0x104, 4, -1},  // past the 4 watched bytes
		{2, true, 0x103, 1, 1},
		{1, true, 0x108, 8, -1}, // the next 8 bytes
	} {
		if got := r.Access(c.tid, c.write, c.addr, c.size); got != c.want {
			t.Errorf("access %d: register %d, want %d", i+1, got, c.want)
		}
	}
	r.Disarm(1, 0)
	if got := r.Access(1, true, 0x100, 8); got != -1 {
		t.Errorf("disarmed register trapped: %d", got)
	}
	if got := r.Threads(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("threads %v", got)
	}
}
