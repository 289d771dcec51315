package collector

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown/metric"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// topdownStatus says which Top-Down trees serve would compute (one per core
// type on hybrids), or why none.
type topdownStatus struct {
	Trees    []treeStatus `json:"trees,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	Warnings []string     `json:"warnings,omitempty"`
}

// samplingStatus says which memory events serve would sample, and what
// this host lacks.
type samplingStatus struct {
	Events  []string           `json:"events"`
	Missing []sampling.Missing `json:"missing"`
	Error   string             `json:"error,omitempty"`
}

func checkSampling(o samplingFlags, s setup) samplingStatus {
	st := samplingStatus{Events: []string{}, Missing: []sampling.Missing{}}
	cfgs, missing, err := sampling.Plan(s.pmus, sampling.Options{Period: o.period, LdLat: o.ldlat, NoSPE: !o.spe, Why: noSPE})
	if err != nil {
		st.Error = err.Error()
	}
	for _, c := range cfgs {
		st.Events = append(st.Events, c.PMU+"/"+c.Name)
	}
	st.Missing = append(st.Missing, missing...)
	return st
}

// cachesStatus is what the exporter knows of the first online CPU's data
// caches and where it learnt it (sysfs, or CPUID where sysfs has none):
// the sizes validate's pointer chase and the reuse miss ratios use, and
// whether communication is folded by shared cache or by package.
type cachesStatus struct {
	CPU   int              `json:"cpu"`
	Facts *host.CacheFacts `json:"facts,omitempty"`
	Error string           `json:"error,omitempty"`
}

func checkCaches(f Options, s setup) cachesStatus {
	if len(s.facts.OnlineCPUs) == 0 {
		return cachesStatus{CPU: -1, Error: "no CPU online"}
	}
	cpu := s.facts.OnlineCPUs[0]
	c, err := host.ReadCacheFacts(f.sysfs, cpu, s.facts.CPU.Vendor, cpuidOn(cpu))
	if err != nil {
		return cachesStatus{CPU: cpu, Error: err.Error()}
	}
	return cachesStatus{CPU: cpu, Facts: &c}
}

func (c cachesStatus) writeText(w io.Writer) {
	if c.Facts == nil {
		fmt.Fprintf(w, "\nCaches:     unknown (CPU %d): %s; no pointer-chase validation or reuse miss ratios, communication folded by package\n", c.CPU, c.Error)
		return
	}
	size := func(n uint64) string {
		if n == 0 {
			return "size unknown"
		}
		return fmt.Sprintf("%d KiB", n>>10)
	}
	fmt.Fprintf(w, "\nCaches:     CPU %d: L1d %s, L2 %s, L%d (last level) %s; from %s", c.CPU, size(c.Facts.L1d), size(c.Facts.L2), c.Facts.LLCLevel, size(c.Facts.LLC), c.Facts.Source)
	if !c.Facts.Sharing {
		fmt.Fprint(w, "; which CPUs share a cache is not known: communication is folded by package")
	}
	fmt.Fprintln(w)
	if c.Facts.Untrusted != "" {
		fmt.Fprintf(w, "            not used: %s\n", c.Facts.Untrusted)
	}
}

// validationStatus is the quick validation's summary, by event: an event
// failed if any of its kernels failed, passed if one passed and none
// failed.
type validationStatus struct {
	Passed        int               `json:"passed"`
	Failed        int               `json:"failed"`
	NotMeasurable int               `json:"not_measurable"`
	Failures      []validate.Result `json:"failures"`
	// Unmeasured is each not measurable event's first row: why not.
	Unmeasured []validate.Result `json:"not_measurable_events"`
	// Samplers are the quick sampler validation's verdicts, by sampler.
	Samplers []samplerStatus `json:"samplers"`
}

// samplerStatus is one sampler's quick validation: whether every figure it
// could measure passed, and the figures that did not.
type samplerStatus struct {
	Sampler  string        `json:"sampler"`
	Passed   bool          `json:"passed"`
	Measured bool          `json:"measured"`
	Failures []sampler.Row `json:"failures"`
}

func checkValidation(f Options, s setup, groups []eventspec.Group) validationStatus {
	events, _ := validationEvents(f, s, groups, nil, validationCPU(s, -1))
	st := validationStatus{Failures: []validate.Result{}, Unmeasured: []validate.Result{}}
	verdict := map[string]validate.Verdict{}
	first := map[string]validate.Result{}
	var order []string
	online := host.NewOnlineCPUsReader(f.sysfs)
	defer online.Close()
	mover := cpuMover{online: online.Read, asked: -1, say: func(string, int, int, error) {}}
	for _, r := range validateEvents(events, true, mover.events) {
		v, seen := verdict[r.Event]
		if !seen {
			order, first[r.Event] = append(order, r.Event), r
		}
		switch {
		case r.Verdict == validate.Fail:
			st.Failures = append(st.Failures, r)
			verdict[r.Event] = validate.Fail
		case r.Verdict == validate.Pass && v != validate.Fail:
			verdict[r.Event] = validate.Pass
		case !seen:
			verdict[r.Event] = r.Verdict
		}
	}
	for _, ev := range order {
		switch verdict[ev] {
		case validate.Pass:
			st.Passed++
		case validate.Fail:
			st.Failed++
		default:
			st.NotMeasurable++
			st.Unmeasured = append(st.Unmeasured, first[ev])
		}
	}
	st.Samplers = samplerStatuses(validateSamplers(planSamplers(true), preciseConfigs(f, s)))
	return st
}

// samplerStatuses sums the samplers' rows, a status each.
func samplerStatuses(rows []sampler.Row) []samplerStatus {
	var out []samplerStatus
	for _, name := range samplerNames(rows) {
		st := samplerStatus{Sampler: name, Failures: []sampler.Row{}}
		var mine []sampler.Row
		for _, r := range rows {
			if r.Sampler != name {
				continue
			}
			mine = append(mine, r)
			if r.Verdict == validate.Fail {
				st.Failures = append(st.Failures, r)
			}
		}
		st.Passed, st.Measured = sampler.Passed(mine)
		out = append(out, st)
	}
	return out
}

// selfStatus is what reading the counters costs and adds: the null-read
// calibration and, per event of the exporter's software group, what one
// more read every 10 ms (against every 100 ms, over 1 s) adds to the
// count on the CPU the reader runs on.
type selfStatus struct {
	CPU            int                `json:"cpu"`
	NullReadMedian float64            `json:"null_read_median_seconds"`
	NullReadMin    float64            `json:"null_read_min_seconds"`
	NullReadIQR    float64            `json:"null_read_iqr_seconds"`
	PerExtraRead   map[string]float64 `json:"per_extra_read"`
	ReaderSwitches float64            `json:"reader_switches_per_read"`
	Error          string             `json:"error,omitempty"`
}

func checkSelf(f Options, s setup) selfStatus {
	cpu, _ := host.IdlestCPU(f.procfs, s.facts.OnlineCPUs, 100*time.Millisecond)
	st := selfStatus{CPU: cpu, PerExtraRead: map[string]float64{}}
	sp, err := nullReads(s, cpu)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.NullReadMedian, st.NullReadMin, st.NullReadIQR = sp.Median.Seconds(), sp.Min.Seconds(), sp.IQR.Seconds()
	ps, err := perturbation(context.Background(), s, cpu, 10*time.Millisecond, time.Second)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	for _, p := range ps {
		st.PerExtraRead[p.Event] = math.Round(p.PerExtraRead*100) / 100
		if p.FastReads > 0 {
			st.ReaderSwitches = math.Round(float64(p.ReaderSwitches[0])/float64(p.FastReads)*100) / 100
		}
	}
	return st
}

func writeSelf(w io.Writer, st selfStatus) {
	if st.Error != "" {
		fmt.Fprintf(w, "\nSelf-perturbation: not measured: %s\n", st.Error)
		return
	}
	fmt.Fprintf(w, "\nSelf-perturbation (CPU %d): a group read costs %s (median of 1,000; min %s, IQR %s)\n", st.CPU,
		time.Duration(st.NullReadMedian*1e9), time.Duration(st.NullReadMin*1e9), time.Duration(st.NullReadIQR*1e9))
	names := slices.Sorted(maps.Keys(st.PerExtraRead))
	var parts, noise []string
	for _, n := range names {
		// Less with more reads is the machine's other work, not the
		// reads': said as noise, not as a negative cost (issue 57).
		if v := st.PerExtraRead[n]; v < 0 {
			noise = append(noise, n)
		} else {
			parts = append(parts, fmt.Sprintf("%s +%.2f", n, v))
		}
	}
	fmt.Fprintf(w, "  each read (every 10 ms against every 100 ms, over 1 s) adds to that CPU's counts: %s (the reader itself switched %.2f times a read)\n",
		cmp.Or(strings.Join(parts, ", "), "nothing measurable"), st.ReaderSwitches)
	if len(noise) > 0 {
		fmt.Fprintf(w, "  %s: fewer with more reads, the machine's other work outweighing the reads' (check --format json has the values)\n", strings.Join(noise, ", "))
	}
}

type treeStatus struct {
	Tree   string `json:"tree"`
	Source string `json:"source"`
}

// RunCheck writes what this host can measure with these options, as text
// or json (format), and returns the exit code: 0 if the exporter can run
// with every group of its configuration, 1 if not.
func RunCheck(f Options, format string, stdout, stderr io.Writer) int {
	s := discover(f)
	var tds topdownStatus
	td, err := setupTopdown(f.tree, f.sysfs, s)
	// Load (and drop) the cgroup attribution as serve would, with the same
	// options.
	groups := s.groups
	if td != nil {
		groups = append(groups, td.groups...)
	}
	a, feat, _ := setupCgroups(f.cgroups, s, td, groups, slog.New(slog.DiscardHandler))
	if a != nil {
		a.Close()
	}
	s.report.Features = append(s.report.Features, feat)
	if userErr := (*metric.UserError)(nil); errors.As(err, &userErr) {
		s.configErrors = append(s.configErrors, err)
	}
	if err != nil {
		tds.Reason = err.Error()
	} else {
		for _, t := range td.trees {
			tds.Trees = append(tds.Trees, treeStatus{Tree: t.Info.Uarch, Source: t.Info.Source})
		}
		tds.Warnings = td.warnings
	}
	collectors := f.collectors.Statuses(s.report)
	for i, c := range collectors {
		why := ""
		switch c.Name {
		case "topdown":
			if len(tds.Trees) == 0 {
				why = "not computed: " + tds.Reason
			}
		case "cgroup":
			if !feat.Available {
				why = feat.Reason
			}
		case "sampling":
			if ms := checkSampling(f.sampling, s); len(ms.Events) == 0 && len(f.sampling.events) == 0 {
				why = "no precise memory sampling here and no --collector.sampling.event"
			}
		}
		if c.Enabled && why != "" {
			collectors[i].Runs, collectors[i].Reason = false, why
		}
	}
	res := checkResult{s: s, tds: tds, collectors: collectors, sampling: checkSampling(f.sampling, s),
		val: checkValidation(f, s, groups), self: checkSelf(f, s), caches: checkCaches(f, s)}
	if format == "json" {
		res.writeJSON(stdout)
	} else {
		res.writeText(stdout)
	}
	if !s.report.Runnable || len(s.configErrors) > 0 {
		// A configuration problem leaves groups uncounted: the
		// configuration is not one to deploy.
		return 1
	}
	return 0
}

// checkResult is what check found, for writing as text or json.
type checkResult struct {
	s          setup
	tds        topdownStatus
	collectors []registry.Status
	sampling   samplingStatus
	val        validationStatus
	self       selfStatus
	caches     cachesStatus
}

// writeJSON writes the result as check --format json does.
func (r checkResult) writeJSON(stdout io.Writer) {
	out := struct {
		capability.Report
		Topdown      topdownStatus     `json:"topdown"`
		Sampling     samplingStatus    `json:"memory_sampling"`
		Collectors   []registry.Status `json:"collectors"`
		ConfigErrors []string          `json:"config_errors"`
		Groups       []string          `json:"groups"`
		Validation   validationStatus  `json:"validation"`
		Self         selfStatus        `json:"self_perturbation"`
		Caches       cachesStatus      `json:"caches"`
	}{Validation: r.val, Self: r.self, Caches: r.caches, Report: r.s.report, Topdown: r.tds, Sampling: r.sampling, Collectors: r.collectors, ConfigErrors: []string{}, Groups: []string{}}
	for _, e := range r.s.configErrors {
		out.ConfigErrors = append(out.ConfigErrors, e.Error())
	}
	for _, g := range r.s.groups {
		out.Groups = append(out.Groups, g.Name)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// writeText writes the result for a reader.
func (r checkResult) writeText(stdout io.Writer) {
	r.s.report.WriteText(stdout)
	r.caches.writeText(stdout)
	fmt.Fprintln(stdout, "\nCollectors:")
	for _, c := range r.collectors {
		switch {
		case !c.Enabled:
			fmt.Fprintf(stdout, "  [off] %s\n", c.Name)
		case c.Runs:
			fmt.Fprintf(stdout, "  [on]  %s\n", c.Name)
		case len(c.Missing) > 0:
			fmt.Fprintf(stdout, "  [no]  %s: this host lacks %s\n", c.Name, strings.Join(c.Missing, ", "))
		default:
			fmt.Fprintf(stdout, "  [no]  %s: %s\n", c.Name, c.Reason)
		}
	}
	if len(r.tds.Trees) > 0 {
		for _, t := range r.tds.Trees {
			fmt.Fprintf(stdout, "\nTop-Down: tree %s, from %s", t.Tree, t.Source)
		}
		fmt.Fprintln(stdout)
		for _, w := range r.tds.Warnings {
			fmt.Fprintf(stdout, "  warning: %s; its events will be multiplexed\n", w)
		}
	} else {
		fmt.Fprintf(stdout, "\nTop-Down: not computed: %s\n", r.tds.Reason)
	}
	ms := r.sampling
	if len(ms.Events) > 0 {
		fmt.Fprintf(stdout, "\nMemory sampling: %s\n", strings.Join(ms.Events, ", "))
	}
	for _, m := range ms.Missing {
		fmt.Fprintf(stdout, "\nMemory sampling: no %s: %s\n", m.What, m.Why)
	}
	if ms.Error != "" {
		fmt.Fprintf(stdout, "\nMemory sampling: %s\n", ms.Error)
	}
	fmt.Fprintf(stdout, "\nValidation loops (quick; pmu_exporter validate for the table): %d events passed, %d failed, %d not measurable\n",
		r.val.Passed, r.val.Failed, r.val.NotMeasurable)
	for _, r := range r.val.Failures {
		fmt.Fprintf(stdout, "  warning: %s does not count what %s does: %s\n", r.Event, r.Loop, r.Reason)
	}
	for _, st := range r.val.Samplers {
		switch {
		case !st.Measured:
			fmt.Fprintf(stdout, "Sampler %s: not validated here\n", st.Sampler)
		case st.Passed:
			fmt.Fprintf(stdout, "Sampler %s: validated (quick; every figure within its bound)\n", st.Sampler)
		default:
			fmt.Fprintf(stdout, "Sampler %s: FAILED validation\n", st.Sampler)
		}
		for _, f := range st.Failures {
			fmt.Fprintf(stdout, "  warning: %s %s at period %d: %.4g beyond its bound %.4g\n", f.Sampler, f.Figure, f.Period, f.Value, f.Bound)
		}
	}
	writeSelf(stdout, r.self)
	if len(r.s.configErrors) > 0 {
		fmt.Fprintf(stdout, "\nConfiguration problems (these groups will not be counted):\n")
		for _, e := range r.s.configErrors {
			fmt.Fprintf(stdout, "  %v\n", e)
		}
	}
}
