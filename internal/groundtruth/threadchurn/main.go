// Command threadchurn is a long-lived process whose threads come and go:
// -threads locked OS threads at a time add atomically to their own 8-byte
// slots of one shared cache line (false sharing) for -life each, then
// exit, and new ones take their place, until -duration has passed (0:
// forever). It is what a thread pool with an idle timeout, or a
// thread-per-request server, looks like to the comm collector, which must
// forget the threads that are gone (scripts/soak-churn).
package main

import (
	"flag"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// slots are 64 bytes: one cache line or two, which the threads share
// either way.
var slots [8]uint64

func main() {
	threads := flag.Int("threads", 2, "threads at a time (1..8)")
	life := flag.Duration("life", 20*time.Millisecond, "how long each thread lives")
	d := flag.Duration("duration", 0, "how long to run (0: forever)")
	flag.Parse()
	n := min(max(*threads, 1), len(slots))
	end := time.Now().Add(*d)
	for *d == 0 || time.Now().Before(end) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
				stop := time.Now().Add(*life)
				for time.Now().Before(stop) {
					for range 1000 {
						atomic.AddUint64(&slots[i], 1)
					}
				}
			}()
		}
		wg.Wait()
	}
}
