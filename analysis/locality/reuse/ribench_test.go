package reuse

import "testing"

// A generated trace's invalidating stores, right after the use or
// (StoreLate) anywhere in the reuse interval: each lies between its
// location's use and reuse by the owner, the truth counts each once, and
// late ones spread over the interval (its first and second halves both
// hold a third or more of them).
func TestGeneratedStores(t *testing.T) {
	for _, late := range []bool{false, true} {
		c := Case{Name: "two", Distances: []uint64{64, 256}, Counts: []int{3, 3}, Invalidate: 0.5, StoreLate: late, Outer: 20}
		type use struct {
			at     int // the owner's access count at its last access
			stored int // the remote store's owner count (-1: none since)
		}
		last := map[uint64]*use{}
		done := map[uint32]int{}
		var stores, bracketed, firstHalf, secondHalf int
		var accesses uint64
		truth := c.Generate(2, 3, func(a Access) {
			if Remote(a.TID) {
				stores++
				u := last[a.Addr]
				if u == nil || u.stored >= 0 {
					t.Fatalf("late=%v: a store to %#x with no use since the last store", late, a.Addr)
				}
				u.stored = done[a.TID-1000]
				return
			}
			accesses++
			done[a.TID]++
			if u := last[a.Addr]; u != nil && u.stored >= 0 {
				bracketed++
				d, at := done[a.TID]-u.at, u.stored-u.at // the distance, and the store's point in it
				if at < 0 || at >= d {
					t.Fatalf("late=%v: a store %d accesses into a reuse interval of %d", late, at, d)
				}
				if 2*at < d {
					firstHalf++
				} else {
					secondHalf++
				}
			}
			last[a.Addr] = &use{at: done[a.TID], stored: -1}
		})
		if uint64(stores) != truth.Invalidated || bracketed != stores || accesses != truth.Accesses || stores == 0 {
			t.Errorf("late=%v: %d stores, %d between a use and its reuse, truth %d; %d accesses, truth %d", late, stores, bracketed, truth.Invalidated, accesses, truth.Accesses)
		}
		if spread := 3*firstHalf >= stores && 3*secondHalf >= stores; spread != late {
			t.Errorf("late=%v: %d stores in the first half of their interval, %d in the second", late, firstHalf, secondHalf)
		}
	}
}
