package memop

import (
	"encoding/hex"
	"testing"
)

// Any bytes decode to an operand or a reason, never a panic; a length,
// whatever the reason, lies within the bytes, and a resolved operand has
// one.
func FuzzDecode(f *testing.F) {
	for _, h := range []string{"f0480102", "488b04cf", "c57d6f1510000000", "db6c2418", "c4e26d900488", "488b", "200020f8", "20fce288", "e48363f8", "f30fae33", "f3480f38f611", "f3490f1ecc", "660f3ace0001"} {
		b, _ := hex.DecodeString(h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		var regs Regs
		for _, o := range []Operand{DecodeAMD64(code), DecodeARM64(code)} {
			if int(o.Len) > min(len(code), MaxInsn) || o.Reason == Resolved && o.Len == 0 {
				t.Fatalf("%v: length %d of %d bytes", o.Reason, o.Len, len(code))
			}
			if o.Reason == Resolved {
				o.Address(&regs, 0x1000)
				o.ReadsAfter()
			}
		}
	})
}
