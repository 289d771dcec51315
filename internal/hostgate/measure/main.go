// Command measure judges the host features that vary between machines
// (package hostgate) twice: by the exporter's own probes, as `pmu_exporter
// check` runs them, and by an independent oracle on the same host (Debian's
// perf, CPUID read by the cpuid tool). It writes the verdicts as JSON, prints
// them, and exits 1 where a probe and its oracle disagree.
//
//	measure -o FILE           judge, write FILE, print the verdicts
//	measure -table FILE LOG [ELSEWHERE]
//	                          print the end-of-run table of FILE and the gate
//	                          log LOG, and where features absent here were
//	                          proven instead (hostgate.Elsewhere lines)
//	measure -state FEATURE FILE
//	                          print FEATURE's state in FILE (present, absent,
//	                          DISPUTED)
//	measure write N           (for the watchpoint oracle) store N times to a global
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "write" {
		n, err := strconv.Atoi(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "measure write:", err)
			os.Exit(2)
		}
		fmt.Printf("%#x\n", write(n))
		return
	}
	out := flag.String("o", "", "write the verdicts (JSON) here")
	table := flag.Bool("table", false, "print the table of the verdicts FILE and the gate log LOG (arguments), and the ELSEWHERE lines (optional third)")
	state := flag.Bool("state", false, "print the state of FEATURE in the verdicts FILE (arguments)")
	flag.Parse()
	if *table {
		if err := printTable(flag.Arg(0), flag.Arg(1), flag.Arg(2)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if *state {
		r, err := hostgate.Read(flag.Arg(1))
		v, ok := r.Verdict(flag.Arg(0))
		if err != nil || !ok {
			fmt.Fprintln(os.Stderr, "host gate: no verdict on", flag.Arg(0), err)
			os.Exit(1)
		}
		fmt.Println(v.State())
		return
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: measure -o FILE | measure -table FILE LOG")
		os.Exit(2)
	}
	r, err := judge()
	if err != nil {
		fmt.Fprintln(os.Stderr, "host gate:", err)
		os.Exit(1)
	}
	if err := r.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "host gate:", err)
		os.Exit(1)
	}
	fmt.Print(hostgate.Table(r, nil))
	if d := r.Disputed(); len(d) > 0 {
		for _, v := range d {
			fmt.Fprintf(os.Stderr, "host gate: %s: the exporter's probe and the oracle disagree (%s)\n", v.Feature, v.Proof())
		}
		os.Exit(1)
	}
}

// watched is what `measure write` stores to and the watchpoint oracle
// watches: a global, at the same address in every run of this (non-PIE)
// binary.
var watched uint64

// write stores to watched n times, and returns its address.
func write(n int) uintptr {
	for i := range n {
		atomic.StoreUint64(&watched, uint64(i))
	}
	return addrOfWatched()
}

func printTable(verdicts, log, elsewhere string) error {
	r, err := hostgate.Read(verdicts)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	uses, err := hostgate.ParseUses(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(log), err)
	}
	fmt.Print(hostgate.Table(r, uses))
	if elsewhere == "" {
		return nil
	}
	if b, err = os.ReadFile(elsewhere); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	es, err := hostgate.ParseElsewhere(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(elsewhere), err)
	}
	fmt.Print(hostgate.ElsewhereTable(es))
	return nil
}

// addrOfWatched is watched's address.
func addrOfWatched() uintptr { return uintptr(unsafe.Pointer(&watched)) }
