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
// behind the first (the two keep that lag, chunk by chunk): each slot the
// walker stores is next touched by the follower half a walk later, and
// each the follower loads by the walker half a walk later: the reuse time
// distance in a shared cache (ReuseTracker's shared mode) is half a walk.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
	pace := flag.Duration("chunk-time", 0, "with -follower: the walker takes at least this long per 4096 slots (a longer walk, so that the reuse distance is well over a tracker's arm latency)")
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

// chunk is how many slots a thread walks between looking at the other.
const chunk = 4096

// followed runs the walker and its follower for d and prints the walker's
// mean walk time and how far behind the follower kept.
func followed(slots int, d, pace time.Duration) {
	n := slots / chunk * chunk
	a := make([]uint64, n)
	for range 2 {
		walk(a)
	}
	var lead, follow atomic.Int64 // slots walked in all
	var stop atomic.Bool
	half := int64(n / 2)
	tids := make(chan int, 2)
	done := make(chan uint64)
	go func() { // the follower: loads, half a walk behind
		runtime.LockOSThread()
		tids <- threadID()
		var sum uint64
		for !stop.Load() {
			if lead.Load()-follow.Load() < half {
				sum += spin(waitSpin)
				continue
			}
			at := int(follow.Load() % int64(n))
			for i := at; i < at+chunk; i++ {
				sum += a[i]
			}
			follow.Add(chunk)
		}
		done <- sum
	}()
	runtime.LockOSThread()
	tids <- threadID()
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"pid": os.Getpid(), "tids": []int{<-tids, <-tids}, "slots": n}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	began := time.Now()
	var burnt uint64
	for end := began.Add(d); time.Now().Before(end); {
		if lead.Load()-follow.Load() > half+chunk {
			burnt += spin(waitSpin) // the follower fell behind: wait
			continue
		}
		at := int(lead.Load() % int64(n))
		t0 := time.Now()
		for i := at; i < at+chunk; i++ {
			a[i]++
		}
		for time.Since(t0) < pace { // the thread keeps its CPU
			burnt += spin(waitSpin)
		}
		lead.Add(chunk)
	}
	walks := float64(lead.Load()) / float64(n)
	stop.Store(true)
	sum := <-done
	json.NewEncoder(os.Stdout).Encode(map[string]any{"walks": walks, "mean_walk_ns": int64(float64(time.Since(began).Nanoseconds()) / walks), "checksum": sum ^ burnt})
}

// waitSpin is spin's count between two looks at the clock or the other
// thread: about a microsecond.
const waitSpin = 300

// spin waits by n rounds of xorshift in registers. The threads wait most
// of the time (a paced chunk is mostly waiting), and a wait on the clock
// or on the other thread's counter loads memory that the other thread
// touches microseconds later: sampled, such a load is a shared reuse that
// a tracker sees only at its arm latency, a distance the benchmark does
// not control. Samples in spin have no memory operand, so nothing is
// armed for them.
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
