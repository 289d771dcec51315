package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pmu-exporter/pmu_exporter/cmd/pmu_exporter/internal/pipeline"
	"github.com/pmu-exporter/pmu_exporter/comm/addrmap"
	"github.com/pmu-exporter/pmu_exporter/comm/cacheline"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// c2cFlags are the options of `pmu_exporter c2c`.
type c2cFlags struct {
	input, format string
	lines, max    int
}

// runC2C builds the shared cache line report of a perf.data file's memory
// samples (perf mem record, perf c2c record), as /debug/cachelines serves
// it live.
func runC2C(cf c2cFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "pmu_exporter c2c: %s: %v\n", cf.input, err)
		return 1
	}
	file, closeFile, err := pipeline.OpenPerfData(cf.input, stdin)
	if err != nil {
		return fail(err)
	}
	defer closeFile()
	table := cacheline.New(cf.max)
	maps := addrmap.New()
	var memSamples uint64
	samples, bad, readErr := pipeline.EachSample(file, cf.input, stderr, pipeline.PerfDataVisitor{
		Record: func(rec []byte, h perfrecord.Header) {
			if h.Type == perfrecord.TypeMmap || h.Type == perfrecord.TypeMmap2 {
				if m, err := perfrecord.DecodeMmap(rec); err == nil {
					maps.Add(m.PID, addrmap.Mapping{Start: m.Addr, End: m.Addr + m.Len, PgOff: m.PgOff, Name: m.Filename})
				}
			}
		},
		Sample: func(i int, s *perfrecord.Sample) error {
			if a, ok := cacheline.AccessOf(s, file.Events.Attrs[i].SamplePeriod()); ok {
				memSamples++
				table.Add(a)
			}
			return nil
		},
	})
	if memSamples == 0 && readErr == nil {
		fmt.Fprintf(stderr, "pmu_exporter c2c: %s: none of its %d samples is a load or store with a data source: record with perf c2c record or perf mem record\n", cf.input, samples)
		return 1
	}
	report := table.Report(cf.lines, maps.Name)
	w := bufio.NewWriter(stdout)
	if cf.format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(report)
	} else {
		writeC2CText(w, report)
	}
	w.Flush()
	if readErr != nil {
		return fail(readErr)
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "pmu_exporter c2c: %d malformed samples skipped\n", bad)
		return 1
	}
	return 0
}

func writeC2CText(w io.Writer, r cacheline.Report) {
	t := r.Totals
	fmt.Fprintf(w, "Memory samples: %d loads, %d stores; HITM: %d local, %d remote; %d without a data address\n",
		t.Loads, t.Stores, t.LocalHITM, t.RemoteHITM, t.NoAddr)
	share := 0.0
	if t.TrueSharing+t.FalseSharing > 0 {
		share = 100 * float64(t.FalseSharing) / float64(t.TrueSharing+t.FalseSharing)
	}
	fmt.Fprintf(w, "Sharing (estimated events): %d false, %d true (%.1f%% false)\n\n", t.FalseSharing, t.TrueSharing, share)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tline\tpid\tHITM lcl/rmt\tstores\tloads\tfalse sharing\ttrue sharing\tmapping")
	for i, l := range r.Lines {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d/%d\t%d\t%d\t%d\t%d\t%s\n", i+1, l.Address, l.PID, l.LocalHITM, l.RemoteHITM,
			l.Stores, l.Loads, l.FalseSharing, l.TrueSharing, l.Symbol)
		for _, th := range l.Threads {
			cpus := make([]string, len(th.CPUs))
			for k, c := range th.CPUs {
				cpus[k] = fmt.Sprint(c)
			}
			fmt.Fprintf(tw, "\t  tid %d\tcpus %s\tread %s\twritten %s\t%d samples\t\t\t\n", th.TID, strings.Join(cpus, ","),
				dash(th.Read), dash(th.Written), th.Samples)
		}
		for _, c := range l.Code {
			fmt.Fprintf(tw, "\t  code %s\toffset %d\t%s\t%d samples\t%d HITM\t\t\t%s\n", c.IP, c.Offset, c.Op, c.Samples, c.HITM, c.Symbol)
		}
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
