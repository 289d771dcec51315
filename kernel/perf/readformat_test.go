package perf

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeGroupRead(t *testing.T) {
	ids := []uint64{7, 9, 11}
	// Kernel order differs from ours; values go by id.
	buf := EncodeGroupRead(1000, 400, []uint64{11, 7, 9}, []uint64{3, 1, 2})
	out := make([]uint64, 3)
	e, r, err := DecodeGroupRead(buf, ids, out)
	if err != nil || e != 1000 || r != 400 || !reflect.DeepEqual(out, []uint64{1, 2, 3}) {
		t.Fatalf("decode = %d %d %v %v", e, r, out, err)
	}
}

func TestDecodeGroupReadRejectsMalformed(t *testing.T) {
	ids := []uint64{7, 9}
	good := EncodeGroupRead(10, 10, ids, []uint64{1, 2})
	cases := map[string][]byte{
		"shorter than the 24-byte header": good[:20],
		"want 56 for 2 events":            good[:40],
		"kernel reports 3 events":         EncodeGroupRead(10, 10, []uint64{7, 9, 10}, []uint64{1, 2, 3}),
		"unknown event id 8":              EncodeGroupRead(10, 10, []uint64{7, 8}, []uint64{1, 2}),
		"appears twice":                   EncodeGroupRead(10, 10, []uint64{7, 7}, []uint64{1, 2}),
	}
	cases["kernel reports 1 events, group has 2: "+ErrGroupBroken.Error()] = EncodeGroupRead(10, 10, []uint64{7}, []uint64{1})
	for want, buf := range cases {
		out := []uint64{42, 42}
		_, _, err := DecodeGroupRead(buf, ids, out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want %q", err, want)
		}
		if broken := strings.Contains(want, "1 events"); errors.Is(err, ErrGroupBroken) != broken {
			t.Errorf("%s: errors.Is(ErrGroupBroken) = %v", want, !broken)
		}
		if out[0] != 42 || out[1] != 42 {
			t.Errorf("%s: values overwritten on error: %v", want, out)
		}
	}
}

func FuzzDecodeGroupRead(f *testing.F) {
	f.Add(EncodeGroupRead(10, 5, []uint64{1, 2}, []uint64{3, 4}))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0})
	f.Add(EncodeGroupRead(10, 5, []uint64{2, 2}, []uint64{3, 4}))
	ids := []uint64{1, 2}
	f.Fuzz(func(t *testing.T, b []byte) {
		out := make([]uint64, 2)
		_, _, _ = DecodeGroupRead(b, ids, out) // must not panic
	})
}
