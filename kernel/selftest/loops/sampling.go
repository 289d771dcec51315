package loops

// The sampling loops: work whose events, instructions and data addresses
// are known (never instrumented by the race detector, go:norace: its
// calls would put the samples and the loads elsewhere), for judging samplers as CAT's loops judge counters (Sasongko's
// Load-Ratio and Bias-Bench, thesis chapter 4). Plain Go: what they are
// judged on (which function, which store, which address) is read back
// from the binary's own symbol table and the decoded instruction, not
// assumed from a layout.

// StoreOffsets are where TwoStores writes in its pages: the even pages at
// offset StoreOffsets[0] by one store instruction, the odd ones at
// StoreOffsets[1] by another.
var StoreOffsets = [2]int{0, 8}

// TwoStores writes once into each of the pages of mem (page bytes each),
// the even ones with one store instruction and the odd ones with another:
// on fresh pages one page fault each, half of them from each instruction
// (a Bias-Bench: one event, two instructions, known shares). It returns
// how many pages it wrote.
//
//go:noinline
//go:norace
func TwoStores(mem []byte, page int) int {
	n := 0
	for off := 0; off+page <= len(mem); off += 2 * page {
		mem[off+StoreOffsets[0]] = 1
		n++
		if odd := off + page; odd+page <= len(mem) {
			mem[odd+StoreOffsets[1]] = 2
			n++
		}
	}
	return n
}

// SpinA and SpinB are the same loop in two functions: alternated in equal
// amounts, each holds half of the time, so a time-proportional sampler
// gives each half of its samples. They return what they computed, so that
// the loop is not optimised away.
//
//go:noinline
//go:norace
func SpinA(n int) uint64 {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// SpinB is SpinA again, at another address.
//
//go:noinline
//go:norace
func SpinB(n int) uint64 {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// SumLoads sums a, reps times: one load per element, each at an address
// the registers still hold after it (a base and an index the next
// instruction does not change), so a timer sample's decoded address can be
// held to the array (Sasongko's Load-Ratio: loads of known addresses).
//
//go:noinline
//go:norace
func SumLoads(a []uint64, reps int) uint64 {
	var sum uint64
	for range reps {
		for i := range a {
			sum += a[i]
		}
	}
	return sum
}

// SumLoadsB is SumLoads again, at another address: the precise load
// samplers' Bias-Bench runs the two on the halves of one array, so that
// each load instruction makes half of the events.
//
//go:noinline
//go:norace
func SumLoadsB(a []uint64, reps int) uint64 {
	var sum uint64
	for range reps {
		for i := range a {
			sum += a[i]
		}
	}
	return sum
}

// StoreAll writes every element of a, reps times: one store each, at an
// address the registers still hold after it (the precise store
// samplers' loop, as SumLoads is the load samplers').
//
//go:noinline
//go:norace
func StoreAll(a []uint64, reps int) {
	for r := range reps {
		for i := range a {
			a[i] = uint64(r)
		}
	}
}

// StoreAllB is StoreAll again, at another address (the precise store
// samplers' Bias-Bench, as SumLoadsB is the loads').
//
//go:noinline
//go:norace
func StoreAllB(a []uint64, reps int) {
	for r := range reps {
		for i := range a {
			a[i] = uint64(r)
		}
	}
}
