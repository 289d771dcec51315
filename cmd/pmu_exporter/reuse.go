package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
)

// reuseFlags are the options of `pmu_exporter reuse`.
type reuseFlags struct {
	trace, format, mode, domains string
	period, armDelay, seed       uint64
	slots                        int
	caches                       []uint64
}

// reuseJSON is `reuse --format json`: reuses and invalidations are the
// traps observed; time_distance_log2[k] estimates the sampled accesses
// reused at a time distance d with floor(log2 d) = k, each observed reuse
// weighted by the inverse of its chance to be observed (its sample taking
// a slot and the slot surviving replacement), observed_time_distance_log2
// the raw counts.
type reuseJSON struct {
	Mode                   string   `json:"mode"`
	Unit                   string   `json:"unit"`
	Samples                uint64   `json:"samples"`
	Dropped                uint64   `json:"dropped"`
	Reuses                 uint64   `json:"reuses"`
	Invalidations          uint64   `json:"invalidations"`
	EstimatedInvalidations uint64   `json:"estimated_invalidations"`
	TimeDistanceLog2       []uint64 `json:"time_distance_log2"`
	Observed               []uint64 `json:"observed_time_distance_log2"`
	// StackDistanceLog2[k] estimates the reuses whose LRU stack distance s
	// (distinct data from use to reuse, the datum included, by the
	// footprint of the whole run) has floor(log2 s) = k.
	StackDistanceLog2 []uint64 `json:"stack_distance_log2"`
	// MissRatio is the share of the sampled accesses that an LRU cache of
	// --cache data would miss (never reused and invalidated ones
	// included), keyed by the cache's size.
	MissRatio map[string]float64 `json:"miss_ratio,omitempty"`
	// Pairs are the estimated reuses by the kinds of use and reuse (RAR,
	// RAW: a read reusing a write, WAR, WAW); Locality by whether the
	// reuse began at the use's address (temporal) or at another address
	// overlapping the watched bytes (spatial).
	Pairs    map[string]uint64 `json:"pairs"`
	Locality map[string]uint64 `json:"locality"`
}

// runReuse runs ReuseTracker over an access trace with the watchpoint
// registers' semantics.
func runReuse(rf reuseFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "pmu_exporter reuse: %s: %v\n", rf.trace, err)
		return 1
	}
	o := reuse.ReplayOptions{Options: reuse.Options{Slots: rf.slots, Seed: rf.seed}, Period: rf.period, ArmDelay: rf.armDelay}
	if rf.mode == "shared" {
		o.Mode = reuse.Shared
		dom, err := parseDomains(rf.domains)
		if err != nil {
			return fail(fmt.Errorf("--domain: %w", err))
		}
		o.Domain = func(tid uint32) int {
			if d, ok := dom[tid]; ok {
				return d
			}
			return -1 - int(tid) // a thread nobody placed shares no cache
		}
	}
	in := stdin
	if rf.trace != "-" {
		f, err := os.Open(rf.trace)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		in = f
	}
	r := reuse.NewReplay(o)
	if err := r.Run(bufio.NewReaderSize(in, 1<<16)); err != nil {
		return fail(err)
	}
	t := r.Tracker
	out := reuseJSON{Mode: o.Mode.String(), Unit: "accesses", Samples: t.Samples, Dropped: t.Dropped, Reuses: t.Reuses,
		Invalidations: t.Invalidations, EstimatedInvalidations: uint64(math.Round(t.EstimatedInvalidations)),
		TimeDistanceLog2: t.Histogram(), Observed: t.Raw()}
	out.Pairs, out.Locality = map[string]uint64{}, map[string]uint64{}
	for _, u := range []reuse.Kind{reuse.Read, reuse.Write} {
		for _, r := range []reuse.Kind{reuse.Read, reuse.Write} {
			out.Pairs[reuse.PairName(u, r)] = uint64(math.Round(t.Pairs[u][r]))
		}
	}
	out.Locality["temporal"] = uint64(math.Round(t.Locality[reuse.Temporal]))
	out.Locality["spatial"] = uint64(math.Round(t.Locality[reuse.Spatial]))
	fp := reuse.NewFootprint(t.Fine[:], float64(t.Samples))
	var bounds []float64
	for k := range len(out.TimeDistanceLog2) + 2 {
		bounds = append(bounds, math.Ldexp(1, k+1)-0.5) // below 2^(k+1)
	}
	below := fp.StackDistances(t.Fine[:], bounds)
	var prev uint64
	for _, c := range below {
		n := uint64(math.Round(c))
		out.StackDistanceLog2 = append(out.StackDistanceLog2, n-min(prev, n))
		prev = max(prev, n)
	}
	for len(out.StackDistanceLog2) > 0 && out.StackDistanceLog2[len(out.StackDistanceLog2)-1] == 0 {
		out.StackDistanceLog2 = out.StackDistanceLog2[:len(out.StackDistanceLog2)-1]
	}
	if len(rf.caches) > 0 {
		out.MissRatio = map[string]float64{}
		for _, c := range rf.caches {
			out.MissRatio[strconv.FormatUint(c, 10)] = math.Round(fp.MissRatio(float64(c))*1e4) / 1e4
		}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if rf.format == "json" {
		enc := json.NewEncoder(w)
		enc.Encode(out)
		return 0
	}
	fmt.Fprintf(w, "Mode %s, distances in accesses: %d samples (%d dropped: no slot took them), %d reuses and %d invalidations observed\n",
		out.Mode, out.Samples, out.Dropped, out.Reuses, out.Invalidations)
	fmt.Fprintf(w, "%-24s %12s %10s\n", "time distance", "estimated", "observed")
	for k, c := range out.TimeDistanceLog2 {
		if c == 0 && out.Observed[k] == 0 {
			continue
		}
		fmt.Fprintf(w, "[%d, %d)%*s %12d %10d\n", uint64(1)<<k, uint64(1)<<(k+1), 22-len(fmt.Sprintf("[%d, %d)", uint64(1)<<k, uint64(1)<<(k+1))), "", c, out.Observed[k])
	}
	fmt.Fprintf(w, "\n%-24s %12s\n", "LRU stack distance", "estimated")
	for k, c := range out.StackDistanceLog2 {
		if c > 0 {
			fmt.Fprintf(w, "%-24s %12d\n", fmt.Sprintf("[%d, %d)", uint64(1)<<k, uint64(1)<<(k+1)), c)
		}
	}
	for _, c := range rf.caches {
		fmt.Fprintf(w, "LRU cache of %d data: miss ratio %.4f\n", c, out.MissRatio[strconv.FormatUint(c, 10)])
	}
	fmt.Fprintf(w, "\nReuses by pair (estimated): RAR %d, RAW %d, WAR %d, WAW %d; temporal %d, spatial %d\n",
		out.Pairs["RAR"], out.Pairs["RAW"], out.Pairs["WAR"], out.Pairs["WAW"], out.Locality["temporal"], out.Locality["spatial"])
	return 0
}

// parseDomains reads "TID=D,TID=D".
func parseDomains(s string) (map[uint32]int, error) {
	out := map[uint32]int{}
	if s == "" {
		return nil, fmt.Errorf("shared mode needs the threads' cache domains, e.g. 1=0,2=0,3=1")
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		tid, err1 := strconv.ParseUint(k, 10, 32)
		d, err2 := strconv.Atoi(v)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q: want TID=DOMAIN", kv)
		}
		out[uint32(tid)] = d
	}
	return out, nil
}
