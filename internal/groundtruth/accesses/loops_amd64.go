package accesses

// StoreLoop makes n plain 8-byte stores to *p (MOVQ DX, (AX)), and
// LoadLoop n plain 8-byte loads of it (MOVQ (AX), BX), in assembly, so
// that each is exactly one access to *p in every build: the race
// detector's instrumentation adds a probe of *p before each access Go
// code makes (TESTB AL, (AX)), which a watchpoint would catch as one more.
//
//go:noescape
func StoreLoop(p *uint64, n int)

//go:noescape
func LoadLoop(p *uint64, n int) uint64
