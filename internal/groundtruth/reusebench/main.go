// Command reusebench is a reuse-distance benchmark with a known distance:
// one locked OS thread stores to each 8-byte slot of an array in turn,
// over and over, so every access reuses its slot one walk later. It
// measures its own walk time and prints it, as one JSON line, before
// running for -duration, and its mean walk time over the run after: the
// reuse time distance a tracker must find.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

func main() {
	slots := flag.Int("slots", 1<<20, "array length in 8-byte slots (the reuse distance in accesses)")
	d := flag.Duration("duration", 3*time.Second, "how long to run")
	flag.Parse()
	runtime.LockOSThread()
	a := make([]uint64, *slots)
	for range 3 { // fault the pages in, warm the caches
		walk(a)
	}
	const calib = 20
	start := time.Now()
	for range calib {
		walk(a)
	}
	perWalk := time.Since(start) / calib
	p, _ := os.Readlink("/proc/thread-self")
	tid, _ := strconv.Atoi(filepath.Base(p))
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"pid": os.Getpid(), "tid": tid, "slots": *slots, "walk_ns": perWalk.Nanoseconds()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The walk time while it ran, as a second line: the reuse distance a
	// tracker sampling it meanwhile must find.
	began, walks := time.Now(), 0
	for end := began.Add(*d); time.Now().Before(end); walks++ {
		walk(a)
	}
	mean := time.Since(began) / time.Duration(max(walks, 1))
	json.NewEncoder(os.Stdout).Encode(map[string]any{"walks": walks, "mean_walk_ns": mean.Nanoseconds()})
}

// walk stores to every slot once.
//
//go:noinline
func walk(a []uint64) {
	for i := range a {
		a[i]++
	}
}
