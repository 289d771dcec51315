package datasrc

import "testing"

// The op and snoop classes by their precedence, case by case: a
// read-modify-write is a load; a HITM outranks a peer transfer, which
// outranks a plain hit; nothing set is na.
func TestOpAndSnoopClasses(t *testing.T) {
	for _, c := range []struct {
		d           DataSrc
		op, snoop   string
		opC         OpClass
		snoopClassC SnoopClass
	}{
		{DataSrc{Op: OpLoad | OpStore, Snoop: SnoopHITM | SnoopHit}, "load", "hitm", OpClassLoad, SnoopClassHITM},
		{DataSrc{Op: OpStore, Snoop: SnoopHit, SnoopX: SnoopXPeer}, "store", "peer", OpClassStore, SnoopClassPeer},
		{DataSrc{Op: OpPfetch, Snoop: SnoopHit | SnoopMiss}, "prefetch", "hit", OpClassPrefetch, SnoopClassHit},
		{DataSrc{Op: OpExec, Snoop: SnoopMiss | SnoopNone}, "exec", "miss", OpClassExec, SnoopClassMiss},
		{DataSrc{Op: OpNA, Snoop: SnoopNone}, "na", "none", OpClassNA, SnoopClassNone},
		{DataSrc{}, "na", "na", OpClassNA, SnoopClassNA},
	} {
		if c.d.OpName() != c.op || c.d.SnoopName() != c.snoop || c.d.OpClass() != c.opC || c.d.SnoopClass() != c.snoopClassC {
			t.Errorf("%+v: %s (%d) / %s (%d), want %s / %s", c.d, c.d.OpName(), c.d.OpClass(), c.d.SnoopName(), c.d.SnoopClass(), c.op, c.snoop)
		}
	}
}
