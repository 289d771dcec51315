package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
	"github.com/pmu-exporter/pmu_exporter/exporter"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/host/capability"
	"github.com/pmu-exporter/pmu_exporter/host/pmu"
	"github.com/pmu-exporter/pmu_exporter/kernel/cpubind"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
	"github.com/pmu-exporter/pmu_exporter/kernel/selftest"
)

// ValidateFlags are `pmu_exporter validate`'s own.
type ValidateFlags struct {
	Events []string // --event: more events to validate (perf syntax)
	Format string
	Quick  bool
	CPU    int // -1: the last online CPU
}

// kernelEvents are the events the kernels are written for: perf's generic
// names, validated on every host (where there is no PMU the hardware ones
// say why not).
var kernelEvents = []string{"instructions", "cycles", "branches", "branch-misses", "L1-dcache-load-misses", "LLC-load-misses",
	"page-faults", "minor-faults", "major-faults", "context-switches", "task-clock", "cpu-migrations"}

// validationEvents lists what to validate: the kernels' own events, those
// of groups (what serve counts: the profile's and the host's Top-Down
// tree's), those of --event, and the breakpoint; each once, by name and
// PMU.
// errBadEvent marks a --event that does not resolve: bad input, exit 2.
var errBadEvent = errors.New("--event")

func validationEvents(f Options, s setup, groups []eventspec.Group, extra []string, cpu int) ([]validationEvent, []error) {
	var out []validationEvent
	var errs []error
	seen := map[string]bool{}
	add := func(ev eventspec.Event) {
		label := ev.Name
		if ev.PMU != "software" && ev.PMU != "cpu" && ev.PMU != "" {
			label = ev.PMU + "/" + ev.Name
		}
		if seen[label] {
			return
		}
		seen[label] = true
		at := cpu
		if len(ev.CPUs) > 0 && !slices.Contains(ev.CPUs, cpu) {
			at = ev.CPUs[len(ev.CPUs)-1] // a hybrid's other core type
		}
		e := validationEvent{Name: ev.Name, Label: label, CPU: at, CPUs: ev.CPUs, Counter: selftest.Counter{Name: label, Attr: ev.Attr}}
		if c, err := host.ReadCacheFacts(f.sysfs, at, s.facts.CPU.Vendor, cpuidOn(at)); err == nil {
			e.Caches.L1d, e.Caches.L2, e.Caches.LLC = c.L1d, c.L2, c.LLC
			e.CacheSource = c.Source
		} else {
			e.CacheSource = err.Error()
		}
		out = append(out, e)
	}
	for _, name := range kernelEvents {
		evs, err := eventspec.Resolve(name, s.pmus)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ev := range evs {
			add(ev)
		}
	}
	for _, g := range groups {
		for _, ev := range g.Events {
			add(ev)
		}
	}
	for _, spec := range extra {
		evs, err := eventspec.Resolve(spec, s.pmus)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", errBadEvent, err))
			continue
		}
		for _, ev := range evs {
			add(ev)
		}
	}
	bp := validationEvent{Name: "breakpoint", Label: "breakpoint", CPU: cpu, Counter: selftest.Counter{Name: "breakpoint"}}
	if f := s.report.Feature(capability.Breakpoints); !f.Available {
		// check has proven it: a watchpoint that opens and counts
		// nothing (a guest the debug registers do not reach) is not an
		// event that failed its kernel.
		bp.Unmeasurable = "the capability probe found no watchpoint firing here: " + f.Reason
	}
	out = append(out, bp)
	return out, errs
}

// cpuidOn reads the caches CPUID describes to cpu, where sysfs describes
// none (host.ReadCacheFacts).
func cpuidOn(cpu int) func(vendor string) (host.CacheFacts, error) {
	return func(vendor string) (host.CacheFacts, error) { return cpubind.CachesOn(vendor, cpu) }
}

// validationCPU is where the kernels run: the one asked for, else the last
// online CPU.
func validationCPU(s setup, asked int) int {
	if asked >= 0 || len(s.facts.OnlineCPUs) == 0 {
		return max(asked, 0)
	}
	return s.facts.OnlineCPUs[len(s.facts.OnlineCPUs)-1]
}

// cpuMover chooses where a measurement goes on when its CPU was offline or
// went offline under it (wentOffline): the last CPU online now among those
// it may run on (nil: any), as onOnlineCPU does for the self-measurements.
// It declines where the user chose the CPU (asked ≥ 0), where the CPU
// failed otherwise, or where no such CPU is online; say hears each move.
type cpuMover struct {
	online func() ([]int, error)
	asked  int
	say    func(what string, from, to int, err error)
}

func (m cpuMover) move(what string, from int, cpus []int, err error) (int, bool) {
	if m.asked >= 0 {
		return 0, false
	}
	now, rerr := m.online()
	if rerr != nil || !wentOffline(err, from, now) {
		return 0, false
	}
	if len(cpus) > 0 {
		now = slices.DeleteFunc(slices.Clone(now), func(c int) bool { return !slices.Contains(cpus, c) })
	}
	now = besides(now, from)
	if len(now) == 0 {
		return 0, false
	}
	to := now[len(now)-1]
	m.say(what, from, to, err)
	return to, true
}

// events is the move validateEvents asks for.
func (m cpuMover) events(ev validationEvent, err error) (int, bool) {
	return m.move(ev.Label, ev.CPU, ev.CPUs, err)
}

// validateOnStart runs the quick validation once, beside the counting,
// and exports its verdicts when done; each failed event is a warning.
func (b *build) validateOnStart() {
	var mu sync.Mutex
	var rows []validate.Result
	var samplerRows []sampler.Row
	vc := exporter.NewValidation(func() []validate.Result {
		mu.Lock()
		defer mu.Unlock()
		return rows
	}).WithSamplers(func() []sampler.Row {
		mu.Lock()
		defer mu.Unlock()
		return samplerRows
	})
	b.p.add("validate", vc)
	b.p.beside = append(b.p.beside, func(ctx context.Context) {
		groups := b.s.groups
		if b.td != nil {
			groups = append(slices.Clone(groups), b.td.groups...)
		}
		events, errs := validationEvents(*b.f, *b.s, groups, nil, validationCPU(*b.s, -1))
		for _, err := range errs {
			b.log.Debug("event not validated", "err", err)
		}
		mover := cpuMover{online: b.online.Read, asked: -1, say: func(what string, from, to int, err error) {
			b.log.Info("validation: its CPU went offline, measuring on another", "event", what, "cpu", from, "now", to, "err", err)
		}}
		// Shutting down does not wait for the kernels (seconds, more on a
		// busy machine): their threads go with the process.
		done := make(chan []validate.Result, 1)
		go func() { done <- validateEvents(events, true, mover.events) }()
		var got []validate.Result
		select {
		case got = <-done:
		case <-ctx.Done():
			return
		}
		samplersDone := make(chan []sampler.Row, 1)
		go func() { samplersDone <- validateSamplers(planSamplers(true), preciseConfigs(*b.f, *b.s)) }()
		select {
		case srows := <-samplersDone:
			logSamplers(b.log, srows)
			mu.Lock()
			samplerRows = srows
			mu.Unlock()
		case <-ctx.Done():
			return
		}
		counts := map[validate.Verdict]int{}
		for _, r := range got {
			counts[r.Verdict]++
			if r.Verdict == validate.Fail {
				b.log.Warn("event failed validation: its counts do not match what the kernel does", "event", r.Event, "kernel", r.Loop, "reason", r.Reason)
			}
		}
		b.log.Info("validation kernels ran", "passed", counts[validate.Pass], "failed", counts[validate.Fail], "not_measurable", counts[validate.NotMeasurable])
		mu.Lock()
		rows = got
		mu.Unlock()
		// What each read adds, at the counting interval against ten times it.
		var ps []selftest.Perturbation
		cpu, err := b.onOnlineCPU("read perturbation", func(online []int) int {
			cpu, _ := host.IdlestCPU(b.f.procfs, online, 200*time.Millisecond)
			return cpu
		}, func(cpu int) (err error) {
			ps, err = perturbation(ctx, *b.s, cpu, b.f.interval, 0)
			return err
		})
		if err != nil {
			b.log.Info("read perturbation not measured", "err", err)
			return
		}
		for _, p := range ps {
			b.p.self.SetPerturbation(p.Event, p.PerExtraRead)
		}
		for _, m := range multiplexErrors(ctx, *b.f, *b.s, cpu, time.Second, mover) {
			if m.Reason == "" {
				vc.SetMultiplexError(m.Event, m.MeanError)
			}
		}
	})
}

// readProbe is the group the self-measurements read: the exporter's own
// software group (what every host counts), system-wide on one CPU.
func readProbe(s setup) ([]eventspec.Attr, []string) {
	for _, g := range s.groups {
		if g.Name != "software" {
			continue
		}
		var attrs []eventspec.Attr
		var names []string
		for _, ev := range g.Events {
			attrs, names = append(attrs, ev.Attr), append(names, ev.Name)
		}
		return attrs, names
	}
	return []eventspec.Attr{{Type: pmu.TypeSoftware, Config: 3 /* context-switches */}}, []string{"context-switches"}
}

// nullReads is the null-read calibration: 1,000 back-to-back reads.
func nullReads(s setup, cpu int) (validate.Spread, error) {
	attrs, names := readProbe(s)
	ds, err := selftest.NullReads(cpu, 1000, attrs, names)
	if err != nil {
		return validate.Spread{}, err
	}
	return validate.Summarize(ds), nil
}

// onOnlineCPU runs measure on the CPU pick chooses among those online, and
// again on another choice (three tries in all) where that CPU went offline
// meanwhile: another process's hotplug must not cost the exporter its
// self-measurements, or leave it exporting a measurement the kernel cut
// short.
func (b *build) onOnlineCPU(what string, pick func(online []int) int, measure func(cpu int) error) (int, error) {
	cpu, err := -1, error(nil)
	for try := 1; try <= 3; try++ {
		online, oerr := b.online.Read()
		if oerr != nil || len(online) == 0 {
			online = b.s.facts.OnlineCPUs
		}
		if try > 1 {
			online = besides(online, cpu)
		}
		cpu = pick(online)
		if err = measure(cpu); err == nil {
			return cpu, nil
		}
		if now, _ := b.online.Read(); !wentOffline(err, cpu, now) {
			return cpu, err
		}
		b.log.Info(what+": its CPU went offline, measuring on another", "cpu", cpu, "err", err)
	}
	return cpu, err
}

// besides is online without cpu where another CPU is left: a CPU going
// offline stays in the online list for a while after the scheduler has
// stopped placing threads there (binding one fails with EINVAL), so the
// one that just failed would be chosen again.
func besides(online []int, cpu int) []int {
	if rest := slices.DeleteFunc(slices.Clone(online), func(c int) bool { return c == cpu }); len(rest) > 0 {
		return rest
	}
	return online
}

// wentOffline says a measurement on cpu failed with err because the CPU
// went offline: it says so, perf found no such CPU (ENODEV), or the CPU is
// not among those online now.
func wentOffline(err error, cpu int, now []int) bool {
	return errors.Is(err, selftest.ErrCPUWentOffline) || errors.Is(err, unix.ENODEV) || !slices.Contains(now, cpu)
}

// lastCPU is the last online CPU, where the validation kernels run.
func lastCPU(online []int) int {
	if len(online) == 0 {
		return 0
	}
	return online[len(online)-1]
}

// calibrateReads measures what a read costs, once at start, beside the
// counting.
func (b *build) calibrateReads() {
	b.p.beside = append(b.p.beside, func(context.Context) {
		var sp validate.Spread
		cpu, err := b.onOnlineCPU("null-read calibration", lastCPU, func(cpu int) (err error) {
			sp, err = nullReads(*b.s, cpu)
			return err
		})
		if err != nil {
			b.log.Info("null-read calibration not done", "err", err)
			return
		}
		b.p.self.SetNullReads(sp)
		b.log.Info("null-read calibration", "cpu", cpu, "reads", sp.N, "median", sp.Median, "min", sp.Min, "iqr", sp.IQR)
	})
}

// perturbation measures what one read adds to a CPU's counts (the idlest
// one, host.IdlestCPU, where others' work drowns it least): reads every
// fast against every ten times fast, over the same window (at least two of
// the slow reads).
func perturbation(ctx context.Context, s setup, cpu int, fast, window time.Duration) ([]selftest.Perturbation, error) {
	all, allNames := readProbe(s)
	var attrs []eventspec.Attr
	var names []string
	for i, a := range all {
		if a.Type == pmu.TypeSoftware && (a.Config == 0 || a.Config == 1) {
			continue // cpu-clock, task-clock: the window's length, not events
		}
		attrs, names = append(attrs, a), append(names, allNames[i])
	}
	return selftest.MeasurePerturbation(ctx, cpu, attrs, names, max(window, 20*fast), fast, 10*fast)
}

// multiplexRow is one event's multiplexing error in `validate`'s output.
type multiplexRow struct {
	Event      string  `json:"event"`
	MeanError  float64 `json:"mean_error"`
	WorstError float64 `json:"worst_error"`
	Copies     int     `json:"copies"`
	Reason     string  `json:"reason,omitempty"`
}

// multiplexErrors measures, for the hardware events the kernels are
// written for, what multiplexing does to their counts: one pinned copy
// against as many multiplexed copies as there are general-purpose
// counters, plus one, over window.
func multiplexErrors(ctx context.Context, f Options, s setup, cpu int, window time.Duration, mover cpuMover) []multiplexRow {
	counters := host.ReadCounters(s.facts.CPU.Vendor).GeneralPurpose
	var out []multiplexRow
	for _, name := range []string{"cycles", "instructions", "branches", "branch-misses"} {
		evs, err := eventspec.Resolve(name, s.pmus)
		if err != nil || len(evs) == 0 {
			continue
		}
		row := multiplexRow{Event: name, Copies: max(counters, 1) + 1}
		pinned, copies, err := selftest.Multiplexed(ctx, cpu, evs[0].Attr, name, row.Copies, window)
		for try := 2; try <= 3 && err != nil; try++ {
			to, ok := mover.move("multiplexing error of "+name, cpu, evs[0].CPUs, err)
			if !ok {
				break
			}
			cpu = to
			pinned, copies, err = selftest.Multiplexed(ctx, cpu, evs[0].Attr, name, row.Copies, window)
		}
		mean, worst, ok := validate.MultiplexError(pinned, copies)
		switch {
		case err != nil:
			row.Reason = err.Error()
		case !ok:
			row.Reason = "no multiplexed copy ran, or the pinned one counted nothing"
		default:
			row.MeanError, row.WorstError = mean, worst
		}
		out = append(out, row)
	}
	return out
}

// RunValidate runs the validation kernels and prints the table; the exit
// code is 1 if an event failed, 2 on bad input, else 0.
func RunValidate(f Options, vf ValidateFlags, stdout, stderr io.Writer) int {
	s := discover(f)
	cpu := validationCPU(s, vf.CPU)
	groups := s.groups
	if td, err := setupTopdown(f.tree, f.sysfs, s); err == nil {
		groups = append(slices.Clone(groups), td.groups...)
	}
	events, errs := validationEvents(f, s, groups, vf.Events, cpu)
	bad := false
	for _, err := range errs {
		fmt.Fprintf(stderr, "pmu_exporter validate: %v\n", err)
		bad = bad || errors.Is(err, errBadEvent)
	}
	if bad {
		return 2
	}
	online := host.NewOnlineCPUsReader(f.sysfs)
	defer online.Close()
	mover := cpuMover{online: online.Read, asked: vf.CPU, say: func(what string, from, to int, err error) {
		fmt.Fprintf(stderr, "pmu_exporter validate: %s: CPU %d went offline; measuring there on CPU %d (%v)\n", what, from, to, err)
	}}
	rows := validateEvents(events, vf.Quick, mover.events)
	samplers := validateSamplers(planSamplers(vf.Quick), preciseConfigs(f, s))
	var mux []multiplexRow
	if !vf.Quick {
		mux = multiplexErrors(context.Background(), f, s, cpu, 500*time.Millisecond, mover)
	}
	if vf.Format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(validationDoc{rows, mux, samplers})
	} else {
		writeValidation(stdout, cpu, rows, s.report)
		writeSamplers(stdout, samplers)
		for _, m := range mux {
			if m.Reason != "" {
				fmt.Fprintf(stdout, "Multiplexing error of %s: not measured: %s\n", m.Event, m.Reason)
				continue
			}
			fmt.Fprintf(stdout, "Multiplexing error of %s: %+.2f%% on average over %d multiplexed copies (worst %+.2f%%) against a pinned copy\n",
				m.Event, 100*m.MeanError, m.Copies, 100*m.WorstError)
		}
	}
	for _, r := range rows {
		if r.Verdict == validate.Fail {
			return 1
		}
	}
	for _, r := range samplers {
		if r.Verdict == validate.Fail {
			return 1
		}
	}
	return 0
}

// validationDoc is `validate --format json`, and what --replay.validation
// reads back.
type validationDoc struct {
	Events      []validate.Result `json:"events"`
	Multiplexed []multiplexRow    `json:"multiplexing,omitempty"`
	Samplers    []sampler.Row     `json:"samplers,omitempty"`
}

func writeValidation(w io.Writer, cpu int, rows []validate.Result, rep capability.Report) {
	fmt.Fprintf(w, "Validation kernels on CPU %d, one event at a time on the kernel's thread (CAT's goodness exp(−2(β·r² − β_e)²) ≥ %.2f passes):\n", cpu, validate.PassGoodness)
	counts := map[validate.Verdict]int{}
	for _, r := range rows {
		counts[r.Verdict]++
		mark := map[validate.Verdict]string{validate.Pass: "[pass]", validate.Fail: "[FAIL]", validate.NotMeasurable: "[n/m] "}[r.Verdict]
		kernel := r.Loop
		if kernel == "" {
			kernel = "-"
		}
		switch r.Verdict {
		case validate.NotMeasurable:
			fmt.Fprintf(w, "  %s %s on %s: not measurable: %s\n", mark, r.Event, kernel, r.Reason)
		case validate.Fail:
			fmt.Fprintf(w, "  %s %s on %s: slope %.4g (want %.4g), r² %.4f, goodness %.3f: %s\n", mark, r.Event, kernel, r.Slope, r.ExpectedSlope, r.R2, r.Goodness, r.Reason)
		default:
			fmt.Fprintf(w, "  %s %s on %s: slope %.4g (want %.4g), r² %.4f, goodness %.3f\n", mark, r.Event, kernel, r.Slope, r.ExpectedSlope, r.R2, r.Goodness)
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d not measurable.\n", counts[validate.Pass], counts[validate.Fail], counts[validate.NotMeasurable])
	if !rep.Feature(capability.HardwareCounters).Available {
		fmt.Fprintf(w, "No hardware counters here (%s): the hardware kernels' events are not measurable; the software and breakpoint kernels still ran.\n",
			rep.Feature(capability.HardwareCounters).Reason)
	}
}

// replayValidation serves what `pmu_exporter validate --format json`
// found on the recording host (--replay.validation): its verdicts and
// goodness as pmu_event_validation_*, its multiplexing errors as
// pmu_event_multiplex_error_ratio. An error names the file and what in it
// is wrong.
func (b *build) replayValidation(path string) error {
	data, err := safeopen.ReadInput("--replay.validation", path, safeopen.Document, nil)
	if err != nil {
		return fmt.Errorf("--replay.validation: %w", err)
	}
	var doc validationDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("--replay.validation: %s: not the output of pmu_exporter validate --format json: %w", path, err)
	}
	if len(doc.Events) == 0 {
		return fmt.Errorf("--replay.validation: %s: no events", path)
	}
	for i, r := range doc.Events {
		switch {
		case r.Event == "":
			return fmt.Errorf("--replay.validation: %s: events[%d] names no event", path, i)
		case r.Loop == "" && r.Verdict != validate.NotMeasurable:
			return fmt.Errorf("--replay.validation: %s: events[%d] (%s): a verdict of %q without the kernel it ran", path, i, r.Event, r.Verdict)
		case r.Verdict != validate.Pass && r.Verdict != validate.Fail && r.Verdict != validate.NotMeasurable:
			return fmt.Errorf("--replay.validation: %s: events[%d] (%s): verdict %q is not pass, fail or not_measurable", path, i, r.Event, r.Verdict)
		}
	}
	for i, r := range doc.Samplers {
		if r.Sampler == "" || r.Figure == "" || r.Verdict != validate.Pass && r.Verdict != validate.Fail && r.Verdict != validate.NotMeasurable {
			return fmt.Errorf("--replay.validation: %s: samplers[%d]: want a sampler, a figure and a verdict of pass, fail or not_measurable, got %+v", path, i, r)
		}
	}
	vc := exporter.NewValidation(func() []validate.Result { return doc.Events }).WithSamplers(func() []sampler.Row { return doc.Samplers })
	for _, m := range doc.Multiplexed {
		if m.Reason == "" {
			vc.SetMultiplexError(m.Event, m.MeanError)
		}
	}
	b.log.Info("replay: validation of the recording host", "file", path, "events", len(doc.Events), "multiplexing", len(doc.Multiplexed), "sampler_figures", len(doc.Samplers))
	b.p.add("validate", vc)
	return nil
}
