package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
)

// c2cFlags are the options of `pmu_exporter c2c`.
type c2cFlags struct {
	input, format, display string
	symfs                  string // where the recorded code is read (perf script --symfs)
	lines, max             int
}

// runC2C builds the shared cache line report of a perf.data file's memory
// samples (perf mem record, perf c2c record), as /debug/cachelines serves
// it live.
func runC2C(cf c2cFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	rec, ok := openRecording("c2c", cf.input, cf.symfs, stdin, stderr)
	if !ok {
		return 1
	}
	defer rec.Close()
	table := cacheline.New(cf.max)
	samples, memSamples, bad, readErr := rec.eachAccess(func(a *memaccess.Access) { table.Add(*a) })
	if memSamples == 0 && readErr == nil {
		fmt.Fprintf(stderr, "pmu_exporter c2c: %s: none of its %d samples is a load or store%s: record with perf c2c record or perf mem record, or without a precise PMU perf record -e cpu-clock:u --user-regs=%s\n", cf.input, samples, unresolvedNote(rec.acc.Resolver), amd64UserRegs)
		return 1
	}
	// Lines are named by their mapping, code by its function where the
	// mapped files have symbols.
	display, err := cacheline.ParseDisplay(cf.display)
	if err != nil {
		fmt.Fprintf(stderr, "pmu_exporter c2c: %v\n", err)
		return 1
	}
	report := table.ReportBy(cf.lines, display, func(pid uint32, addr uint64) string { return rec.acc.Code.Symbolize(pid, addr).String() })
	return rec.report(stdout, cf.format, report, func(w io.Writer) { writeC2CText(w, report) }, readErr, bad)
}

func writeC2CText(w io.Writer, r cacheline.Report) {
	t := r.Totals
	fmt.Fprintf(w, "Memory samples: %d loads, %d stores; HITM: %d local, %d remote; peer snoops: %d local, %d remote; %d without a data address\n",
		t.Loads, t.Stores, t.LocalHITM, t.RemoteHITM, t.LocalPeer, t.RemotePeer, t.NoAddr)
	share := 0.0
	if t.TrueSharing+t.FalseSharing > 0 {
		share = 100 * float64(t.FalseSharing) / float64(t.TrueSharing+t.FalseSharing)
	}
	fmt.Fprintf(w, "Sharing (estimated events): %d false, %d true (%.1f%% false)\n\n", t.FalseSharing, t.TrueSharing, share)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tline\tpid\tHITM lcl/rmt\tpeer lcl/rmt\tstores\tloads\tfalse sharing\ttrue sharing\tmapping")
	for i, l := range r.Lines {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d/%d\t%d/%d\t%d\t%d\t%d\t%d\t%s\n", i+1, l.Address, l.PID, l.LocalHITM, l.RemoteHITM,
			l.LocalPeer, l.RemotePeer, l.Stores, l.Loads, l.FalseSharing, l.TrueSharing, l.Symbol)
		// Where its loads and stores were served, perf c2c's table columns;
		// timer samples (decoded addresses) have no data source to say it.
		if sv := l.Served; sv != (cacheline.Served{}) {
			fmt.Fprintf(tw, "\t  loads from\tFB/L1/L2 %d/%d/%d\tLLC %d+%d HITM\tremote %d+%d HITM\tDRAM %d/%d lcl/rmt\tstores L1 %d/%d/%d hit/miss/NA\t\t\t\n",
				sv.LoadFB, sv.LoadL1, sv.LoadL2, sv.LoadLLCHit, sv.LoadLLCHITM, sv.LoadRemoteHit, sv.LoadRemoteHITM, sv.LoadLocalDRAM, sv.LoadRemoteDRAM,
				sv.StoreL1Hit, sv.StoreL1Miss, sv.StoreNA)
		}
		for _, th := range l.Threads {
			cpus := make([]string, len(th.CPUs))
			for k, c := range th.CPUs {
				cpus[k] = fmt.Sprint(c)
			}
			fmt.Fprintf(tw, "\t  tid %d\tcpus %s\tread %s\twritten %s\t%d samples\t\t\t\t\n", th.TID, strings.Join(cpus, ","),
				dash(th.Read), dash(th.Written), th.Samples)
		}
		for _, c := range l.Code {
			fmt.Fprintf(tw, "\t  code %s\tat byte %d of the line\t%s\t%d samples\t%d HITM\t%d peer\t\t\t%s%s\n", c.IP, c.Offset, c.Op, c.Samples, c.HITM, c.Peer, c.Symbol, meanCycles(c.LoadCycles))
		}
		for _, p := range l.Pairs {
			fmt.Fprintf(tw, "\t  tids %d ↔ %d\t%d sharing events (estimated)\t\t\t\t\t\t\t\n", p.A, p.B, p.Events)
		}
	}
	tw.Flush()
}

// meanCycles says a code row's mean load latencies, as perf c2c's cycles
// columns, by where the loads were served; "" without latencies.
func meanCycles(c *cacheline.LoadCycles) string {
	if c == nil {
		return ""
	}
	var parts []string
	for _, k := range []struct {
		name string
		v    float64
	}{{"remote HITM", c.RemoteHITM}, {"local HITM", c.LocalHITM}, {"remote peer", c.RemotePeer}, {"local peer", c.LocalPeer}, {"other", c.Other}} {
		if k.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k.name, k.v))
		}
	}
	return "\tmean load cycles: " + strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
