package watch

import "testing"

// Ungated, in the package's own tests: found.
func TestCostUngated(t *testing.T) { TrapCost(1) }
