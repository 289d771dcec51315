package loops

import (
	"testing"
)

// The loops compute what their Go models compute: they ran every
// iteration, took the branches they should, and the assembly RNG is the
// xorshift64 of Rng.
func TestKernelsCompute(t *testing.T) {
	for _, size := range []uint64{1, 2, 7, 1000, 12345} {
		if n := InstrLoop(size); n != size {
			t.Errorf("InstrLoop(%d) = %d", size, n)
		}
		even4, even5 := uint64(0), uint64(0)
		x4, x5 := uint64(Seed), uint64(Seed)
		for range size {
			x4 = Rng(x4)
			if x4%2 == 0 {
				even4++
			}
			x4 = Rng(x4)
			x5 = Rng(x5)
			if x5%2 == 0 {
				even5++
			}
		}
		want := [7][2]uint64{
			{0, 2 * (size / 2)},
			{2 * size, 2 * size},
			{0, 2 * size},
			{2 * even4, 2 * size},
			{2 * even5, 2 * size},
			{2 * size, size + 1},
			{0, 2 * size},
		}
		for k, f := range Branches {
			if g1, g2 := f(size); g1 != want[k][0] || g2 != want[k][1] {
				t.Errorf("Branch%d(%d) = %d, %d, want %d, %d", k+1, size, g1, g2, want[k][0], want[k][1])
			}
		}
	}
}

// The chain is one cycle through every element.
func TestCycle(t *testing.T) {
	chain := Cycle(1000, 8, 3)
	seen := map[uint64]bool{}
	i := uint64(0)
	for range 1000 {
		if seen[i] || i%8 != 0 {
			t.Fatalf("element %d visited twice or misaligned", i)
		}
		seen[i] = true
		i = chain[i]
	}
	if i != 0 || Chase(chain, 1000) != 0 {
		t.Errorf("the chain does not close after 1000 steps")
	}
}
