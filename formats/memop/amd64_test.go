package memop

import (
	"encoding/hex"
	"testing"
)

// Encodings from GNU as; expectations computed by hand from the Intel SDM.
func TestDecodeAMD64(t *testing.T) {
	var regs Regs
	regs[AMD64AX] = 0x1000
	regs[AMD64CX] = 3
	regs[AMD64DX] = 0x7f0000000040
	regs[AMD64DI] = 0x5000
	regs[AMD64SP] = 0x7ffc0000
	regs[AMD64SI] = 0x6000
	regs[AMD64BX] = 0x9000
	regs[AMD64R8+4] = 5 // r12
	regs[AMD64R8+7] = 0x8000
	regs[AMD64BP] = 0xa000
	const pc = 0x401000
	for _, c := range []struct {
		asm, hex string
		reason   Reason
		kind     Kind
		atomic   bool
		width    uint16
		addr     uint64
		after    bool // ReadsAfter
	}{
		{"lock add %rax,(%rdx)", "f0480102", Resolved, RMW, true, 8, 0x7f0000000040, true},
		{"mov (%rdi,%rcx,8),%rax", "488b04cf", Resolved, Load, false, 8, 0x5000 + 3*8, true},
		{"mov %eax,8(%rsp)", "89442408", Resolved, Store, false, 4, 0x7ffc0008, true},
		{"mov 0x10(%rip),%rax", "488b0510000000", Resolved, Load, false, 8, pc + 7 + 0x10, true},
		{"mov %fs:0x28,%rax", "64488b042528000000", Segment, 0, false, 0, 0, false},
		{"lea (%rdi,%rcx,8),%rax", "488d04cf", NoMemory, 0, false, 0, 0, false},
		{"rep movsq", "f348a5", String, 0, false, 0, 0, false},
		{"xchg %rax,(%rdx)", "488702", Resolved, RMW, true, 8, 0x7f0000000040, true},
		{"cmp (%rdi),%rax", "483b07", Resolved, Load, false, 8, 0x5000, true},
		{"cmp %rax,(%rdi)", "483907", Resolved, Load, false, 8, 0x5000, true},
		{"mov (%eax,%ecx,4),%eax", "678b0488", Resolved, Load, false, 4, 0x1000 + 12, false},
		{"vpgatherdd %ymm2,(%rax,%ymm1,4),%ymm0", "c4e26d900488", Gather, 0, false, 0, 0, false},
		{"mov (%rax),%rax", "488b00", Resolved, Load, false, 8, 0x1000, false},
		{"movzbl -0x10(%rbx,%r12,2),%ecx", "420fb64c63f0", Resolved, Load, false, 1, 0x9000 + 10 - 0x10, true},
		{"vmovdqu %ymm0,0x20(%r15)", "c4c17e7f4720", Resolved, Store, false, 32, 0x8020, true},
		{"incl 4(%rsi)", "ff4604", Resolved, RMW, false, 4, 0x6004, true},
		{"prefetcht0 (%rax)", "0f1808", NoMemory, 0, false, 0, 0, false},
		{"nopw 0x0(%rax,%rax,1)", "660f1f0400", NoMemory, 0, false, 0, 0, false},
		{"push 8(%rbp)", "ff7508", Resolved, Load, false, 8, 0xa008, true},
		{"vmovdqa 0x10(%rip),%ymm10", "c57d6f1510000000", Resolved, Load, false, 32, pc + 8 + 0x10, true},
		{"fldt 0x18(%rsp)", "db6c2418", Resolved, Load, false, 10, 0x7ffc0018, true},
		{"mov truncated before its ModRM byte", "488b", Undecodable, 0, false, 0, 0, false},
	} {
		code, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		o := DecodeAMD64(code)
		if o.Reason != c.reason {
			t.Errorf("%s: reason %v, want %v", c.asm, o.Reason, c.reason)
			continue
		}
		if c.reason == Undecodable {
			continue
		}
		if int(o.Len) != len(code) {
			t.Errorf("%s: length %d, want %d", c.asm, o.Len, len(code))
		}
		if c.reason != Resolved {
			continue
		}
		if o.Kind != c.kind || o.Atomic != c.atomic || o.Width != c.width {
			t.Errorf("%s: kind %v atomic %v width %d, want %v %v %d", c.asm, o.Kind, o.Atomic, o.Width, c.kind, c.atomic, c.width)
		}
		if a := o.Address(&regs, pc); a != c.addr {
			t.Errorf("%s: address %#x, want %#x", c.asm, a, c.addr)
		}
		if o.ReadsAfter() != c.after {
			t.Errorf("%s: ReadsAfter %v, want %v", c.asm, o.ReadsAfter(), c.after)
		}
	}
}

// x86asm reads F3 0F AE /4–/6 without their F3 prefix: clrssbsy as a store
// of xsaveopt, ptwrite as xsave. They are the shadow stack and a trace
// write, not the operands a store would name; the same groups without the
// prefix keep their kind. An instruction x86asm does not know, in a group
// whose layout the SDM fixes, keeps its length (the forward scan needs it)
// but is undecodable.
func TestPrefixedGroupsAndLengthOnly(t *testing.T) {
	for _, c := range []struct {
		asm, hex string
		reason   Reason
		kind     Kind
	}{
		{"clrssbsy (%rbx)", "f30fae33", Undecodable, 0},
		{"ptwritel 0x8(%rbp)", "f30fae6508", Undecodable, 0},
		{"ptwrite %rax", "f3480faee0", NoMemory, 0},
		{"xsaveopt (%rbx)", "0fae33", Resolved, Store},
		{"xsave64 (%rax)", "480fae20", Resolved, Store},
		{"adox (%rcx),%rdx", "f3480f38f611", Undecodable, 0},
		{"rdsspq %r12", "f3490f1ecc", NoMemory, 0},
	} {
		code, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		o := DecodeAMD64(append(code, 0x90, 0x90))
		if o.Reason != c.reason || o.Kind != c.kind || int(o.Len) != len(code) {
			t.Errorf("%s: %v %v length %d, want %v %v length %d", c.asm, o.Reason, o.Kind, o.Len, c.reason, c.kind, len(code))
		}
	}
}
