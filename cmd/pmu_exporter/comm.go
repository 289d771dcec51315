package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
)

// commFlags are the options of `pmu_exporter comm`.
type commFlags struct {
	input, format string
	symfs         string // where the recorded code is read (perf script --symfs)
	lines, window int
	pid           int
}

// runComm builds ComDetective's communication matrices from a recording:
// timer samples with user registers (decoded) or precise memory samples.
func runComm(cf commFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	rec, ok := openRecording("comm", cf.input, cf.symfs, stdin, stderr)
	if !ok {
		return 1
	}
	defer rec.Close()
	sampler := recorded.Sampler(rec.file.Events.Attrs, rec.file.Names)
	window := comdetect.Window(cf.window, sampler != "decode")
	det := comdetect.New(comdetect.Options{Window: window})
	samples, accesses, bad, readErr := rec.eachAccess(func(a *comdetect.Access) { det.Add(a) })
	for k, name := range rec.acc.Names {
		det.SetName(k[0], k[1], name)
	}
	if accesses == 0 && readErr == nil {
		fmt.Fprintf(stderr, "pmu_exporter comm: %s: none of its %d samples resolved to a memory access%s: %s\n",
			cf.input, samples, unresolvedNote(rec.acc.Resolver), unresolvedHint(rec.acc.Resolver.Outcomes(), cf.symfs))
		return 1
	}
	report := comdetect.JSON(det.Report(uint32(cf.pid), cf.lines), func(pid uint32, ip uint64) string {
		return rec.acc.Code.Symbolize(pid, ip).String()
	})
	return rec.report(stdout, cf.format, report, func(w io.Writer) {
		writeCommText(w, report, rec.acc.Resolver, samples, accesses, det.Window(), volumeUnit(sampler))
	}, readErr, bad)
}

// unresolvedNote says why a recording's samples did not resolve, for the
// error that says none did: " (unresolved: kernel 12, ...)", or "".
func unresolvedNote(res *memop.Resolver) string {
	if u := res.Outcomes().UnresolvedText(); u != "" {
		return " (unresolved: " + u + ")"
	}
	return ""
}

// unresolvedHint is what to do where no sample resolved, for the reason
// most did not: code that could not be read wants the recording host's
// files (--symfs); samples without registers want another recording.
func unresolvedHint(o memop.Outcomes, symfs string) string {
	if o.Unresolved[memop.Unreadable] > o.Unresolved[memop.NoRegisters] {
		if symfs == "" {
			return "the sampled code could not be read here: pass --symfs DIR, a copy of the recording host's files (DIR/usr/bin/x for its /usr/bin/x), as perf script --symfs"
		}
		return "the sampled code could not be read under --symfs " + symfs + ": it needs the recording host's files at their paths there"
	}
	return "record with perf record -e cpu-clock:u --user-regs=" + amd64UserRegs + ", or perf mem record / perf c2c record"
}

// volumeUnit is what the matrices' volumes count: each detection weighs
// its sample's period, nanoseconds of CPU time for the timer samples the
// address sampler decodes, events (accesses) for precise samples.
func volumeUnit(sampler string) string {
	if sampler == "decode" {
		return "sampled CPU nanoseconds: each detection weighs its timer sample's period"
	}
	return "estimated accesses"
}

// amd64UserRegs is perf record's --user-regs list for the x86-64 sampler.
const amd64UserRegs = "ax,bx,cx,dx,si,di,bp,sp,ip,flags,cs,ss,r8,r9,r10,r11,r12,r13,r14,r15"

// writeCommText prints each process's matrices as perf c2c users read
// tables: threads as rows and columns, then the shared lines and the code
// behind them.
func writeCommText(w io.Writer, r comdetect.ReportJSON, res *memop.Resolver, samples, accesses uint64, window int, unit string) {
	fmt.Fprintf(w, "Samples: %d, resolved to a memory access: %d (window: %d of a reader's samples)\n", samples, accesses, window)
	if u := res.Outcomes().UnresolvedText(); u != "" {
		fmt.Fprintf(w, "Unresolved: %s\n", u)
	}
	quiet := 0
	for _, p := range r.Processes {
		if p.Detections.True+p.Detections.False == 0 {
			quiet++ // nothing to show: an empty section per process hid the rest
			continue
		}
		fmt.Fprintf(w, "\n=== pid %d (%s): %d true-sharing and %d false-sharing detections ===\n", p.PID, p.Comm, p.Detections.True, p.Detections.False)
		for _, mt := range []struct {
			name string
			m    [][]uint64
		}{{"all", p.All}, {"true sharing", p.True}, {"false sharing", p.False}} {
			fmt.Fprintf(w, "\nThread × thread, %s (%s):\n", mt.name, unit)
			writeMatrix(w, p.Threads, p.ThreadNames, mt.m)
		}
		if len(p.CPUs) > 0 {
			fmt.Fprintf(w, "\nCPU × CPU, all (%s):\n", unit)
			writeMatrix(w, p.CPUs, nil, p.CPUAll)
		}
		if len(p.Lines) > 0 {
			fmt.Fprintf(w, "\nShared lines:\n")
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "line address\taccesses\ttrue sharing\tfalse sharing\tdetections\t\n")
			for _, l := range p.Lines {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", l.Addr, l.All, l.True, l.False, l.Detections)
			}
			tw.Flush()
			for _, l := range p.Lines {
				fmt.Fprintf(w, "  code on line %s:\n", l.Addr)
				for _, c := range l.Code {
					fmt.Fprintf(w, "    %8d detections  %s  %s\n", c.Detections, c.IP, c.Symbol)
				}
			}
		}
	}
	if quiet > 0 {
		fmt.Fprintf(w, "\n%d processes with no detection are not shown (--format json lists them)\n", quiet)
	}
}

func writeMatrix(w io.Writer, ids []uint32, names []string, m [][]uint64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, id := range ids {
		fmt.Fprintf(tw, "%d\t", id)
	}
	fmt.Fprintln(tw)
	for i, id := range ids {
		label := fmt.Sprint(id)
		if i < len(names) && names[i] != "" {
			label = fmt.Sprintf("%d %s", id, names[i])
		}
		fmt.Fprintf(tw, "%s\t", label)
		for j := range ids {
			fmt.Fprintf(tw, "%d\t", m[i][j])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
