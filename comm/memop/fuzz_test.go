package memop

import (
	"encoding/hex"
	"testing"
)

// Any bytes decode to an operand or a reason, never a panic, and a
// resolved operand's length lies within the bytes.
func FuzzDecode(f *testing.F) {
	for _, h := range []string{"f0480102", "488b04cf", "c57d6f1510000000", "db6c2418", "c4e26d900488", "488b", "200020f8", "20fce288", "e48363f8"} {
		b, _ := hex.DecodeString(h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		var regs Regs
		for _, o := range []Operand{DecodeAMD64(code), DecodeARM64(code)} {
			if o.Reason == Resolved {
				if int(o.Len) > len(code) || o.Len == 0 {
					t.Fatalf("length %d of %d bytes", o.Len, len(code))
				}
				o.Address(&regs, 0x1000)
				o.ReadsAfter()
			}
		}
	})
}
