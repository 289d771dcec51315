package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/reuse"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
)

// reuseFlags are the options of `pmu_exporter reuse`.
type reuseFlags struct {
	trace, format, mode, domains string
	period, armDelay, seed       uint64
	slots, own                   int
	caches                       []uint64
}

// reuseJSON is `reuse --format json`: reuses and invalidations are the
// traps observed; time_distance_log2[k] estimates the sampled accesses
// reused at a time distance d with floor(log2 d) = k (share × samples),
// observed_time_distance_log2 the raw counts; distances has each bin's
// share of the sampled accesses with its 95% interval and the reuses it
// rests on. The estimate uses every watch, censored ones included
// (analysis/locality/reuse.LifeTable; docs/sampling.md).
type reuseJSON struct {
	Mode                   string `json:"mode"`
	Unit                   string `json:"unit"`
	Samples                uint64 `json:"samples"`
	Dropped                uint64 `json:"dropped"`
	Reuses                 uint64 `json:"reuses"`
	Invalidations          uint64 `json:"invalidations"`
	EstimatedInvalidations uint64 `json:"estimated_invalidations"`
	// Stale are traps of a slot's earlier arm; Traps and Arms count the
	// simulated registers' traps (each a reuse, an invalidation or stale)
	// and arms (a slot armed in one thread), as pmu_comm_watchpoint_*.
	Stale            uint64   `json:"stale"`
	Traps            uint64   `json:"traps"`
	Arms             uint64   `json:"arms"`
	TimeDistanceLog2 []uint64 `json:"time_distance_log2"`
	Observed         []uint64 `json:"observed_time_distance_log2"`
	// Watches are the slots' watches by how they ended: reused,
	// invalidated, ended (armed when the trace ended) and censored (a
	// later sample took the slot first).
	Watches map[string]uint64 `json:"watches"`
	// Distances are the estimated bins; Invalidated, Ended the other
	// outcomes' shares; Unreused the share with no outcome by the horizon
	// though watches were followed well past the last one (taken as not
	// reused), NotResolved the share with none where they were not (a
	// reuse further than any watch lasted, or none). Horizon is the oldest
	// age a watch reached. All shares are of the sampled accesses and sum
	// to 1.
	Distances   []reuseBinJSON `json:"distances"`
	Invalidated reuseShareJSON `json:"invalidated"`
	Ended       reuseShareJSON `json:"ended"`
	Unreused    float64        `json:"unreused"`
	NotResolved float64        `json:"not_resolved"`
	Horizon     uint64         `json:"horizon"`
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

// reuseShareJSON is an estimated share with its 95% interval (none where
// nothing was observed) and the watches behind it.
type reuseShareJSON struct {
	Share    float64 `json:"share"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
	Observed uint64  `json:"observed"`
}

// reuseBinJSON is one log2 bin of distances, [from, to).
type reuseBinJSON struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	reuseShareJSON
}

func shareJSON(s reuse.Share) reuseShareJSON {
	r := func(v float64) float64 { return math.Round(v*1e6) / 1e6 }
	return reuseShareJSON{Share: r(s.Share), Low: r(s.Low), High: r(s.High), Observed: s.Observed}
}

// runReuse runs ReuseTracker over an access trace with the watchpoint
// registers' semantics: the flags' options, the trace's replay, the
// report, written as JSON or text.
func runReuse(rf reuseFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "pmu_exporter reuse: %s: %v\n", rf.trace, err)
		return 1
	}
	o, err := replayOptions(rf)
	if err != nil {
		return fail(err)
	}
	r, err := replayTrace(rf.trace, o, stdin)
	if err != nil {
		return fail(err)
	}
	out := reuseReport(r, o.Mode, rf.caches)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if rf.format == "json" {
		json.NewEncoder(w).Encode(out)
		return 0
	}
	writeReuseText(w, out, rf.caches)
	return 0
}

// replayOptions are the tracker's and the harness's options the flags give.
func replayOptions(rf reuseFlags) (reuse.ReplayOptions, error) {
	o := reuse.ReplayOptions{Options: reuse.Options{Slots: rf.slots, Own: rf.own, Seed: rf.seed}, Period: rf.period, ArmDelay: rf.armDelay}
	if rf.mode != "shared" {
		return o, nil
	}
	o.Mode = reuse.Shared
	dom, err := parseDomains(rf.domains)
	if err != nil {
		return o, fmt.Errorf("--domain: %w", err)
	}
	o.Domain = func(tid uint32) int {
		if d, ok := dom[tid]; ok {
			return d
		}
		return -1 - int(tid) // a thread nobody placed shares no cache
	}
	return o, nil
}

// replayTrace runs the trace at path ("-": stdin) through a tracker on
// simulated debug registers.
func replayTrace(path string, o reuse.ReplayOptions, stdin io.Reader) (*reuse.Replay, error) {
	in, err := safeopen.Input("--trace", path, safeopen.Trace, stdin)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	r := reuse.NewReplay(o)
	if err := r.Run(bufio.NewReaderSize(in, 1<<16)); err != nil {
		return nil, err
	}
	return r, nil
}

// reuseReport is what the replay's tracker observed and estimates: the
// outcomes, the distances, the pairs and localities, the stack distances
// and the miss ratios of LRU caches of the given sizes.
func reuseReport(r *reuse.Replay, mode reuse.Mode, caches []uint64) reuseJSON {
	t := r.Tracker
	e := t.Estimate()
	out := reuseJSON{Mode: mode.String(), Unit: "accesses", Samples: t.Samples, Dropped: t.Dropped, Reuses: t.Reuses,
		Invalidations: t.Invalidations, EstimatedInvalidations: uint64(math.Round(e.Invalidated.Share * float64(t.Samples))),
		Stale: t.Stale, Traps: r.Traps, Arms: r.Arms,
		TimeDistanceLog2: t.Histogram(), Observed: t.Raw(), Watches: map[string]uint64{},
		Invalidated: shareJSON(e.Invalidated), Ended: shareJSON(e.Ended), Horizon: e.Horizon,
		Unreused: math.Round(e.Unreused*1e6) / 1e6, NotResolved: math.Round(e.NotResolved*1e6) / 1e6}
	for o, name := range []string{reuse.Reused: "reused", reuse.Invalidated: "invalidated", reuse.Ended: "ended", reuse.Censored: "censored"} {
		out.Watches[name] = t.Watches(reuse.Outcome(o))
	}
	out.Distances = []reuseBinJSON{}
	for k, b := range e.Bins {
		if b.Share > 0 || b.Observed > 0 {
			out.Distances = append(out.Distances, reuseBinJSON{From: 1 << k, To: 1 << (k + 1), reuseShareJSON: shareJSON(b)})
		}
	}
	pairs, loc := t.Pairs(&e), t.Localities(&e)
	out.Pairs, out.Locality = map[string]uint64{}, map[string]uint64{}
	for _, u := range []reuse.Kind{reuse.Read, reuse.Write} {
		for _, r := range []reuse.Kind{reuse.Read, reuse.Write} {
			out.Pairs[reuse.PairName(u, r)] = uint64(math.Round(pairs[u][r] * float64(t.Samples)))
		}
	}
	out.Locality["temporal"] = uint64(math.Round(loc[reuse.Temporal] * float64(t.Samples)))
	out.Locality["spatial"] = uint64(math.Round(loc[reuse.Spatial] * float64(t.Samples)))
	out.StackDistanceLog2, out.MissRatio = stackDistances(&e, t.Samples, len(out.TimeDistanceLog2), caches)
	return out
}

// stackDistances are the estimate's reuses by log2 bin of their LRU stack
// distance (footprint theory), up to the last bin used, over bins+2 bins;
// and the miss ratio of an LRU cache of each size in caches (nil: none).
func stackDistances(e *reuse.Estimate, samples uint64, bins int, caches []uint64) ([]uint64, map[string]float64) {
	fine := e.Fine
	for j := range fine {
		fine[j] *= float64(samples)
	}
	fp := reuse.NewFootprint(fine[:], float64(samples))
	var bounds []float64
	for k := range bins + 2 {
		bounds = append(bounds, math.Ldexp(1, k+1)-0.5) // below 2^(k+1)
	}
	var counts []uint64
	var prev uint64
	for _, c := range fp.StackDistances(fine[:], bounds) {
		n := uint64(math.Round(c))
		counts = append(counts, n-min(prev, n))
		prev = max(prev, n)
	}
	for len(counts) > 0 && counts[len(counts)-1] == 0 {
		counts = counts[:len(counts)-1]
	}
	var miss map[string]float64
	if len(caches) > 0 {
		miss = map[string]float64{}
		for _, c := range caches {
			miss[strconv.FormatUint(c, 10)] = math.Round(fp.MissRatio(float64(c))*1e4) / 1e4
		}
	}
	return counts, miss
}

// writeReuseText writes the report as the text table.
func writeReuseText(w io.Writer, out reuseJSON, caches []uint64) {
	fmt.Fprintf(w, "Mode %s, distances in accesses: %d samples (%d dropped: no slot took them), %d reuses and %d invalidations observed\n",
		out.Mode, out.Samples, out.Dropped, out.Reuses, out.Invalidations)
	fmt.Fprintf(w, "%-24s %12s %9s %19s %10s\n", "time distance", "estimated", "share", "95% interval", "observed")
	for _, b := range out.Distances {
		fmt.Fprintf(w, "%-24s %12d %9.4f %19s %10d\n", fmt.Sprintf("[%d, %d)", b.From, b.To), uint64(math.Round(b.Share*float64(out.Samples))),
			b.Share, fmt.Sprintf("[%.4f, %.4f]", b.Low, b.High), b.Observed)
	}
	fmt.Fprintf(w, "%-24s %12d %9.4f %19s %10d\n", "invalidated", out.EstimatedInvalidations, out.Invalidated.Share,
		fmt.Sprintf("[%.4f, %.4f]", out.Invalidated.Low, out.Invalidated.High), out.Invalidations)
	fmt.Fprintf(w, "%-24s %12s %9.4f %19s %10d\n", "armed at the trace's end", "", out.Ended.Share, "", out.Watches["ended"])
	if out.NotResolved > 0 {
		fmt.Fprintf(w, "%-24s %12s %9.4f  (no outcome by the oldest watch, %d: a reuse further away, or none)\n", "not resolved", "", out.NotResolved, out.Horizon)
	}
	if out.Unreused > 0 {
		fmt.Fprintf(w, "%-24s %12s %9.4f  (no outcome by %d, though watches lasted past twice the last one: taken as not reused)\n", "not reused", "", out.Unreused, out.Horizon)
	}
	fmt.Fprintf(w, "Watches: %d reused, %d invalidated, %d armed at the end, %d censored (a later sample took the slot)\n",
		out.Watches["reused"], out.Watches["invalidated"], out.Watches["ended"], out.Watches["censored"])
	fmt.Fprintf(w, "\n%-24s %12s\n", "LRU stack distance", "estimated")
	for k, c := range out.StackDistanceLog2 {
		if c > 0 {
			fmt.Fprintf(w, "%-24s %12d\n", fmt.Sprintf("[%d, %d)", uint64(1)<<k, uint64(1)<<(k+1)), c)
		}
	}
	for _, c := range caches {
		fmt.Fprintf(w, "LRU cache of %d data: miss ratio %.4f\n", c, out.MissRatio[strconv.FormatUint(c, 10)])
	}
	fmt.Fprintf(w, "\nReuses by pair (estimated): RAR %d, RAW %d, WAR %d, WAW %d; temporal %d, spatial %d\n",
		out.Pairs["RAR"], out.Pairs["RAW"], out.Pairs["WAR"], out.Pairs["WAW"], out.Locality["temporal"], out.Locality["spatial"])
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
