package addrmap

import "testing"

func TestName(t *testing.T) {
	m := New()
	m.Add(7, Mapping{Start: 0x400000, End: 0x401000, PgOff: 0x2000, Name: "/bin/app"})
	m.Add(7, Mapping{Start: 0x600000, End: 0x700000, Name: "[heap]"})
	m.Add(7, Mapping{Start: 0x10000, End: 0x20000})
	for _, c := range []struct {
		pid  uint32
		addr uint64
		want string
	}{
		{7, 0x400040, "/bin/app+0x2040"},
		{7, 0x6fffff, "[heap]+0xfffff"},
		{7, 0x700000, ""}, // end is exclusive
		{7, 0x10008, "[anon]+0x8"},
		{7, 0x3fffff, ""},
		{8, 0x400040, ""},
	} {
		if got := m.Name(c.pid, c.addr); got != c.want {
			t.Errorf("pid %d %#x: %q, want %q", c.pid, c.addr, got, c.want)
		}
	}
	// A new mapping over part of the heap replaces it.
	m.Add(7, Mapping{Start: 0x680000, End: 0x690000, Name: "/dev/shm/x"})
	if got := m.Name(7, 0x600010); got != "" {
		t.Errorf("replaced heap still named: %q", got)
	}
	if got := m.Name(7, 0x680010); got != "/dev/shm/x+0x10" {
		t.Errorf("new mapping: %q", got)
	}
	m.Set(9, []Mapping{{Start: 0x2000, End: 0x3000, Name: "b"}, {Start: 0x1000, End: 0x2000, Name: "a"}})
	if m.Name(9, 0x1800) != "a+0x800" || !m.Has(9) {
		t.Error("Set did not sort")
	}
	m.Forget(9)
	if m.Has(9) {
		t.Error("Forget")
	}
}
