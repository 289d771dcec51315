// Package cpubind runs work on a chosen CPU (a thread bound with
// sched_setaffinity): CPUID answers for the core it runs on, which on hybrid
// parts differs by core type.
package cpubind

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/host"
)

// CountersOn decodes the counters of one logical CPU. Hybrid parts answer
// CPUID for the core type the instruction runs on (Golden Cove 8, Gracemont 6
// general-purpose counters), so the query runs there.
func CountersOn(vendor string, cpu int) (host.Counters, error) {
	var c host.Counters
	err := RunOn(cpu, func() { c = host.ReadCounters(vendor) })
	return c, err
}

// RunOn runs fn on a thread bound to cpu. The thread stays locked, and so is
// discarded by the runtime when fn returns, rather than going back to the pool
// with a narrowed affinity.
func RunOn(cpu int, fn func()) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- fmt.Errorf("bind a thread to CPU %d: %w", cpu, err)
			return
		}
		fn()
		done <- nil
	}()
	return <-done
}

// CachesOn decodes the caches CPUID describes to one logical CPU (where
// sysfs describes none): a hybrid's core types have caches of their own.
func CachesOn(vendor string, cpu int) (host.CacheFacts, error) {
	var c host.CacheFacts
	var cerr error
	if err := RunOn(cpu, func() { c, cerr = host.ReadCPUIDCaches(vendor) }); err != nil {
		return c, err
	}
	return c, cerr
}

// Allowed are the CPUs this thread may run on (sched_getaffinity),
// ascending.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}
