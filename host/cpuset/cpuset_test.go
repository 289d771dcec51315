package cpuset

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"0-3,8\n", []int{0, 1, 2, 3, 8}},
		{"0", []int{0}},
		{"", []int{}},
		{"4-5,0-1,1", []int{0, 1, 4, 5}},
		{"0-7,16-23", []int{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.in, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"a", "3-1", "1-", "-1", "0-70000", "1,,2"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted a malformed list", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	if got := Format([]int{0, 1, 2, 3, 8, 10, 11}); got != "0-3,8,10-11" {
		t.Errorf("Format = %q", got)
	}
	if !Contains([]int{0, 2, 4}, 4) || Contains([]int{0, 2, 4}, 3) {
		t.Error("Contains is wrong")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "1", "0-1,4-5", "9-2", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := Parse(s)
		if err != nil {
			return
		}
		// Whatever parses must print and re-parse to the same set.
		again, err := Parse(Format(cpus))
		if err != nil || !reflect.DeepEqual(again, cpus) {
			t.Fatalf("round trip of %q: %v -> %q -> %v (%v)", s, cpus, Format(cpus), again, err)
		}
	})
}
