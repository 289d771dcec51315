// Command sharebench is ComDetective's ground-truth sharing benchmarks
// (thesis Appendix A, Listings 5.1, 5.2 and 5.4), written for tests: every
// thread is one locked OS thread that atomically adds to 8-byte slots whose
// lines the benchmark chooses, picking each iteration's target with an
// inline xorshift generator. It prints, as one JSON line before the work
// starts, its pid, the threads' tids and the address of each slot, so a
// test knows exactly which lines are shared, by whom and how.
//
//	false-sharing: with probability f a thread adds to its own slot of one
//	               line all threads' slots share, else to one truly shared
//	               variable on another line
//	padded:        the same with every thread's slot on a line of its own
//	p2p:           four threads in pairs (0,1) and (2,3); with probability f
//	               a thread adds to its pair's variable (a line per pair),
//	               else to its own padded slot
//	volume:        with probability f a thread adds to the one shared
//	               variable, else to its own padded slot
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

const line = 64

// arena holds every slot, line-aligned by hand: 64 lines.
var arena [65 * line]byte

// Layout is what the benchmark prints.
type Layout struct {
	PID     int      `json:"pid"`
	Mode    string   `json:"mode"`
	F       float64  `json:"f"`
	TIDs    []int    `json:"tids"`
	Own     []uint64 `json:"own"`    // each thread's private (or falsely shared) slot
	Shared  []uint64 `json:"shared"` // each thread's shared variable
	Threads int      `json:"threads"`
}

func main() {
	mode := flag.String("mode", "false-sharing", "false-sharing, padded, p2p or volume")
	f := flag.Float64("f", 0.5, "probability of the first kind of access")
	threads := flag.Int("threads", 2, "threads (p2p: 4)")
	d := flag.Duration("duration", 2*time.Second, "how long to run")
	iters := flag.Int("iters", 0, "instead of -duration: adds per thread, and print the elapsed time")
	flag.Parse()
	if err := run(*mode, *f, *threads, *d, *iters); err != nil {
		fmt.Fprintln(os.Stderr, "sharebench:", err)
		os.Exit(2)
	}
}

func run(mode string, f float64, threads int, d time.Duration, iters int) error {
	if mode == "p2p" {
		threads = 4
	}
	if threads < 1 || threads > 8 || f < 0 || f > 1 {
		return fmt.Errorf("threads %d (1..8) or f %g (0..1) out of range", threads, f)
	}
	skip := int(-uintptr(unsafe.Pointer(&arena[0])) & (line - 1)) // to the first line boundary
	slot := func(l, i int) *uint64 { return (*uint64)(unsafe.Pointer(&arena[skip+l*line+i*8])) }
	own := make([]*uint64, threads)
	shared := make([]*uint64, threads)
	for t := range threads {
		switch mode {
		case "false-sharing":
			own[t], shared[t] = slot(0, t), slot(2, 0)
		case "padded", "volume":
			own[t], shared[t] = slot(4+2*t, 0), slot(2, 0)
		case "p2p":
			own[t], shared[t] = slot(4+2*t, 0), slot(30+2*(t/2), 0)
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	threshold := uint64(f * (1 << 63))
	if f == 1 {
		threshold = 1 << 63
	}
	l := Layout{PID: os.Getpid(), Mode: mode, F: f, Threads: threads, TIDs: make([]int, threads)}
	for t := range threads {
		l.Own = append(l.Own, uint64(uintptr(unsafe.Pointer(own[t]))))
		l.Shared = append(l.Shared, uint64(uintptr(unsafe.Pointer(shared[t]))))
	}
	var ready, done sync.WaitGroup
	var stop atomic.Bool
	// Each worker reports its slots' final counts here, so that the main
	// thread never touches a measured line (its read would be a
	// communication of its own).
	final := make([][2]uint64, threads)
	start := make(chan struct{})
	ready.Add(threads)
	done.Add(threads)
	for t := range threads {
		go func() {
			runtime.LockOSThread()
			l.TIDs[t] = tid()
			ready.Done()
			<-start
			first, second := own[t], shared[t]
			if mode == "p2p" || mode == "volume" { // f is the sharing fraction
				first, second = second, first
			}
			work(first, second, threshold, uint64(t)*0x9E3779B97F4A7C15+1, iters, &stop)
			final[t] = [2]uint64{atomic.LoadUint64(own[t]), atomic.LoadUint64(shared[t])}
			done.Done()
		}()
	}
	ready.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(l); err != nil {
		return err
	}
	began := time.Now()
	close(start)
	if iters == 0 {
		time.Sleep(d)
		stop.Store(true)
	}
	done.Wait()
	elapsed := time.Since(began)
	// The exact accesses, as a second line: each slot's final count, as
	// the last of its writers to finish read it (every writer of a slot
	// reads it once done; counts only grow).
	counts := map[string]uint64{}
	for t := range threads {
		own, sh := fmt.Sprintf("%#x", l.Own[t]), fmt.Sprintf("%#x", l.Shared[t])
		counts[own] = max(counts[own], final[t][0])
		counts[sh] = max(counts[sh], final[t][1])
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"counts": counts, "elapsed_seconds": elapsed.Seconds()})
}

// work is the measured loop: for the first kind (probability threshold /
// 2^63) an atomic add to first, else to second; iters adds, or (0) until
// stop.
//
//go:noinline
func work(first, second *uint64, threshold, x uint64, iters int, stop *atomic.Bool) {
	for i := 0; iters == 0 || i < iters; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if x>>1 < threshold {
			atomic.AddUint64(first, 1)
		} else {
			atomic.AddUint64(second, 1)
		}
		if i&1023 == 0 && stop.Load() {
			return
		}
	}
}

// tid is the calling thread's id, from /proc/thread-self (PID/task/TID).
func tid() int {
	p, err := os.Readlink("/proc/thread-self")
	if err != nil {
		return -1
	}
	n, _ := strconv.Atoi(filepath.Base(p))
	return n
}
