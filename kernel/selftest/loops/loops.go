// Package loops holds CAT's validation loops (Danalis et al., and the
// instruction loop of Zapanuks et al.): code whose event counts are known
// in advance. The loops are Go assembly for amd64 and arm64, since a
// compiler rewrites branches (CAT's Fig. 8) and the expectations depend on
// the exact layout; a test disassembles them and asserts it. Each returns
// what it computed, so that a test can check without a PMU that it ran the
// iterations it should.
package loops

// InstrLoop runs the loop of Zapanuks et al.'s Fig. 3: one move, then n
// iterations of add, compare and a conditional branch: 1 + 3·n
// instructions (n ≥ 1). It returns n.
func InstrLoop(n uint64) uint64

// Branch loops (CAT Fig. 11), each a do-while loop of size iterations
// (size ≥ 1); rng is a branch-free xorshift64 (x ^= x<<13; x ^= x>>7;
// x ^= x<<17) seeded with Seed; gv1 and gv2 start at 0. Per iteration,
// conditional branches executed (CE), retired (CR), taken (T), direct
// unconditional (D) and mispredicted (M):
//
//	1: if temp < size/2 { gv2 += 2 }; rng; temp++                          2 2 1.5 0 0
//	2: gv2 += 2; if temp < gv2 { gv1 += 2 }; rng; temp++ (always true)      2 2 1   0 0
//	3: gv2 += 2; if temp > gv2 { gv1 += 2 }; rng; temp++ (always false)     2 2 2   0 0
//	4: rng; gv2 += 2; if result%2 == 0 { gv1 += 2 }; rng; temp++            2 2 1.5 0 0.5
//	5: as 4 without the trailing rng                                        2.5 2 1.5 0 0.5
//	6: if temp < gv2 { gv1 += 2; goto zz }; rng; zz: temp++; rng (gv2 = size+1) 2 2 1 1 0
//	7: gv2 += 2; temp++                                                     1 1 1   0 0
//
// An if jumps over its body when its condition is false; the loop branch
// jumps back while temp < size. They return gv1 and gv2.
func Branch1(size uint64) (gv1, gv2 uint64)
func Branch2(size uint64) (gv1, gv2 uint64)
func Branch3(size uint64) (gv1, gv2 uint64)
func Branch4(size uint64) (gv1, gv2 uint64)
func Branch5(size uint64) (gv1, gv2 uint64)
func Branch6(size uint64) (gv1, gv2 uint64)
func Branch7(size uint64) (gv1, gv2 uint64)

// Seed is the branch loops' RNG seed.
const Seed = 0x9E3779B97F4A7C15

// Branches are the branch loops in CAT's order.
var Branches = [7]func(uint64) (uint64, uint64){Branch1, Branch2, Branch3, Branch4, Branch5, Branch6, Branch7}

// Rng is the loops' xorshift64 step, for checking them.
func Rng(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// Chase follows a pointer chain steps times from index 0 (each element
// holds the index of the next) and returns where it stopped: one
// dependent load per step.
func Chase(chain []uint64, steps int) uint64 {
	i := uint64(0)
	for range steps {
		i = chain[i]
	}
	return i
}

// Cycle makes a chain over n elements that visits all of them in a random
// order (Sattolo's algorithm: one cycle), so that the prefetchers cannot
// guess the next line. Elements are spaced stride uint64s apart (8: one per
// 64-byte line); the chain has n·stride elements.
func Cycle(n, stride int, seed uint64) []uint64 {
	order := make([]uint64, n)
	for i := range order {
		order[i] = uint64(i)
	}
	x := seed | 1
	for i := n - 1; i > 0; i-- {
		x = Rng(x)
		j := int(x % uint64(i)) // j < i: Sattolo, a single cycle
		order[i], order[j] = order[j], order[i]
	}
	chain := make([]uint64, n*stride)
	for k := range n {
		from, to := order[k], order[(k+1)%n]
		chain[from*uint64(stride)] = to * uint64(stride)
	}
	return chain
}
