//go:build !amd64

package accesses

// StoreLoop makes n plain 8-byte stores to *p; LoadLoop n plain loads of
// it (in Go here: on amd64 in assembly, one access each under the race
// detector too).
//
//go:noinline
func StoreLoop(p *uint64, n int) {
	for i := range n {
		*p = uint64(i)
	}
}

//go:noinline
func LoadLoop(p *uint64, n int) (s uint64) {
	for range n {
		s += *p
	}
	return s
}
