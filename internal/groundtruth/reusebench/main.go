// Command reusebench is a reuse-distance benchmark with a known distance:
// one locked OS thread stores to each 8-byte slot of an array in turn,
// over and over, so every access reuses its slot one walk later. It
// measures its own walk time and prints it, as one JSON line, before
// running for -duration, and its mean walk time over the run after: the
// reuse time distance a tracker must find.
//
// With -sleep the thread sleeps that long after each walk: the reuse
// distance is then a walk and a sleep of time (mean_walk_ns) but only a
// walk of the thread's CPU time (mean_walk_cpu_ns, which it reads from
// /proc/thread-self/schedstat): a tracker on the thread's own clock must find
// the second.
//
// With -naps N the thread sleeps briefly N times a walk, at even steps:
// each slot is then reused N of the thread's context switches later (more
// when it is preempted), a clock that software counts
// (--collector.comm.reuse-clock=context-switches stands in for a PMU's
// loads and stores); it prints its switches per walk (mean_walk_switches,
// from /proc/thread-self/status).
//
// With -follower a second locked thread loads every slot half a walk
// behind the first, both keeping to the clock (-chunk-time per 4,096
// slots): each slot the walker stores is next touched by the follower half
// a walk later, and each the follower loads by the walker half a walk
// later: the reuse time distance in a shared cache (ReuseTracker's shared
// mode) is half a walk. Each thread also times, chunk by chunk, how long
// after the other thread touched a chunk it touches it, and the run's last
// line gives the median of those times (median_lag_ns), what a tracker
// must find even where a loaded machine delays the threads.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	slots := flag.Int("slots", 1<<20, "array length in 8-byte slots (the reuse distance in accesses)")
	d := flag.Duration("duration", 3*time.Second, "how long to run")
	follower := flag.Bool("follower", false, "a second thread loads every slot half a walk behind the first")
	sleep := flag.Duration("sleep", 0, "sleep this long after each walk (the thread's CPU time stands still meanwhile)")
	naps := flag.Int("naps", 0, "sleep briefly this many times a walk, at even steps (a context switch each)")
	pace := flag.Duration("chunk-time", 40*time.Microsecond, "with -follower: each thread touches a chunk of 4096 slots every this long by the clock (a walk long enough that half of it is well over a tracker's arm latency)")
	flag.Parse()
	if *follower {
		followed(*slots, *d, *pace)
		return
	}
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
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"pid": os.Getpid(), "tid": threadID(), "slots": *slots, "walk_ns": perWalk.Nanoseconds()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The walk time while it ran, as a second line: the reuse distance a
	// tracker sampling it meanwhile must find.
	began, cpu0, switches0, walks := time.Now(), threadCPU(), switches(), 0
	for end := began.Add(*d); time.Now().Before(end); walks++ {
		if *naps > 0 {
			step := len(a) / *naps
			for i := range *naps {
				walk(a[i*step : (i+1)*step])
				time.Sleep(time.Microsecond)
			}
		} else {
			walk(a)
		}
		if *sleep > 0 {
			time.Sleep(*sleep)
		}
	}
	n := time.Duration(max(walks, 1))
	json.NewEncoder(os.Stdout).Encode(map[string]any{"walks": walks, "mean_walk_ns": (time.Since(began) / n).Nanoseconds(),
		"mean_walk_cpu_ns": ((threadCPU() - cpu0) / n).Nanoseconds(), "mean_walk_switches": float64(switches()-switches0) / float64(n)})
}

// switches is the calling (locked) thread's context switches so far,
// voluntary and not (/proc/thread-self/status).
func switches() int64 {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			total += n
		}
	}
	return total
}

// threadCPU is the calling (locked) thread's CPU time: the scheduler's
// sum_exec_runtime, the first field of /proc/thread-self/schedstat.
func threadCPU() time.Duration {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err == nil {
		var ns int64
		if _, err = fmt.Sscan(string(b), &ns); err == nil {
			return time.Duration(ns)
		}
	}
	fmt.Fprintln(os.Stderr, "the thread's CPU time:", err)
	os.Exit(2)
	return 0
}

// walk stores to every slot once.
//
//go:noinline
func walk(a []uint64) {
	for i := range a {
		a[i]++
	}
}

// chunk is how many slots a -follower thread touches at each tick of its
// clock.
const chunk = 4096

// followed runs the walker and its follower for d and prints the walk
// time and the times from one thread's touch of a chunk to the other's.
//
// Both threads keep to the clock, not to each other: the walker stores
// to chunk k mod chunks at began + k·pace, the follower loads it half a
// walk later, and a thread that lost its CPU catches up at once. On a
// loaded machine the time from one thread's touch to the other's then
// stays near half a walk, give or take a scheduling delay, where threads
// that waited for each other drifted apart by whole timeslices; and
// neither polls a counter the other writes, whose sampled loads would be
// shared reuses seen only at a tracker's arm latency.
func followed(slots int, d, pace time.Duration) {
	n := slots / chunk * chunk
	chunks := n / chunk
	a := make([]uint64, n)
	for range 2 {
		walk(a)
	}
	half := time.Duration(chunks/2) * pace
	// When each chunk was last stored and loaded (ns since began), and the
	// times from one thread's touch of a chunk to the other's.
	stored, loaded := make([]atomic.Int64, chunks), make([]atomic.Int64, chunks)
	tids := make(chan int, 2)
	start := make(chan time.Time)
	type result struct {
		sum  uint64
		lags []int64
	}
	done := make(chan result)
	go func() { // the follower: loads, half a walk behind
		runtime.LockOSThread()
		tids <- threadID()
		began := <-start
		var r result
		for k := 0; ; k++ {
			at := began.Add(half + time.Duration(k)*pace)
			if at.After(began.Add(d)) {
				break
			}
			c := k % chunks
			var burnt uint64
			now := waitUntil(at, &burnt)
			for i := c * chunk; i < (c+1)*chunk; i++ {
				r.sum += a[i]
			}
			ns := now.Sub(began).Nanoseconds()
			if s := stored[c].Load(); s > 0 {
				r.lags = append(r.lags, ns-s)
			}
			loaded[c].Store(ns)
			r.sum ^= burnt
		}
		done <- r
	}()
	runtime.LockOSThread()
	tids <- threadID()
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"pid": os.Getpid(), "tids": []int{<-tids, <-tids}, "slots": n}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	began := time.Now()
	start <- began
	var burnt uint64
	var lags []int64
	k := 0
	for ; ; k++ {
		at := began.Add(time.Duration(k) * pace)
		if at.After(began.Add(d)) {
			break
		}
		c := k % chunks
		now := waitUntil(at, &burnt)
		for i := c * chunk; i < (c+1)*chunk; i++ {
			a[i]++
		}
		ns := now.Sub(began).Nanoseconds()
		if l := loaded[c].Load(); l > 0 {
			lags = append(lags, ns-l)
		}
		stored[c].Store(ns)
	}
	walks := float64(k) / float64(chunks)
	r := <-done
	lags = append(lags, r.lags...)
	slices.Sort(lags)
	var median int64
	if len(lags) > 0 {
		median = lags[len(lags)/2]
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"walks": walks, "mean_walk_ns": int64(float64(time.Since(began).Nanoseconds()) / walks),
		"median_lag_ns": median, "lags": len(lags), "checksum": r.sum ^ burnt})
}

// waitUntil spins (keeping the CPU, in registers) until the clock reads
// at, and returns the clock.
func waitUntil(at time.Time, burnt *uint64) time.Time {
	for {
		now := time.Now()
		if !now.Before(at) {
			return now
		}
		*burnt += spin(waitSpin)
	}
}

// waitSpin is spin's count between two looks at the clock: about a
// microsecond.
const waitSpin = 300

// spin waits by n rounds of xorshift in registers. The threads wait most
// of the time (a chunk takes a few µs of its 40), and a wait that loaded
// memory the other thread touches (as a counter polled between them once
// did) would be sampled as a shared reuse a tracker sees only at its arm
// latency, a distance the benchmark does not control. Samples in spin
// have no memory operand, so nothing is armed for them.
//
//go:noinline
func spin(n int) uint64 {
	x := uint64(n) | 1
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

func threadID() int {
	p, _ := os.Readlink("/proc/thread-self")
	tid, _ := strconv.Atoi(filepath.Base(p))
	return tid
}
