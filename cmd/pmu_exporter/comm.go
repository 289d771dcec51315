package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/comdetect"
	"github.com/pmu-exporter/pmu_exporter/analysis/locality/memop"
	"github.com/pmu-exporter/pmu_exporter/collector"
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
	window := comdetect.Window(cf.window, collector.RecordedSampler(rec.file.Events.Attrs, rec.file.Names) != "decode")
	det := comdetect.New(comdetect.Options{Window: window})
	samples, accesses, bad, readErr := rec.eachAccess(func(a *comdetect.Access) { det.Add(a) })
	for k, name := range rec.acc.Names {
		det.SetName(k[0], k[1], name)
	}
	if accesses == 0 && readErr == nil {
		fmt.Fprintf(stderr, "pmu_exporter comm: %s: none of its %d samples resolved to a memory access%s: record with perf record -e cpu-clock:u --user-regs=%s, or perf mem record / perf c2c record\n",
			cf.input, samples, unresolvedNote(rec.acc.Resolver), amd64UserRegs)
		return 1
	}
	report := comdetect.JSON(det.Report(uint32(cf.pid), cf.lines), func(pid uint32, ip uint64) string {
		return rec.acc.Code.Symbolize(pid, ip).String()
	})
	return rec.report(stdout, cf.format, report, func(w io.Writer) {
		writeCommText(w, report, rec.acc.Resolver, samples, accesses, det.Window())
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

// amd64UserRegs is perf record's --user-regs list for the x86-64 sampler.
const amd64UserRegs = "ax,bx,cx,dx,si,di,bp,sp,ip,flags,cs,ss,r8,r9,r10,r11,r12,r13,r14,r15"

// writeCommText prints each process's matrices as perf c2c users read
// tables: threads as rows and columns, then the shared lines and the code
// behind them.
func writeCommText(w io.Writer, r comdetect.ReportJSON, res *memop.Resolver, samples, accesses uint64, window int) {
	fmt.Fprintf(w, "Samples: %d, resolved to a memory access: %d (window: %d of a reader's samples)\n", samples, accesses, window)
	if u := res.Outcomes().UnresolvedText(); u != "" {
		fmt.Fprintf(w, "Unresolved: %s\n", u)
	}
	for _, p := range r.Processes {
		fmt.Fprintf(w, "\n=== pid %d (%s): %d true-sharing and %d false-sharing detections ===\n", p.PID, p.Comm, p.Detections.True, p.Detections.False)
		for _, mt := range []struct {
			name string
			m    [][]uint64
		}{{"all", p.All}, {"true sharing", p.True}, {"false sharing", p.False}} {
			fmt.Fprintf(w, "\nThread × thread, %s (estimated accesses):\n", mt.name)
			writeMatrix(w, p.Threads, p.ThreadNames, mt.m)
		}
		if len(p.CPUs) > 0 {
			fmt.Fprintf(w, "\nCPU × CPU, all (estimated accesses):\n")
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
