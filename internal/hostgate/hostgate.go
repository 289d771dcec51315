// Package hostgate holds the verdicts on the host features that vary between
// the machines the suite runs on (hardware counting, precise sampling,
// watchpoints that fire, cache topology, SMT, CPU hotplug): for each, what the
// product's own probe says and what an independent oracle (Debian's perf,
// CPUID read by the cpuid tool, /proc) says. A feature both call present makes
// its tests required; one both call absent skips them with both proofs; one
// they disagree on fails the run. The verdicts are measured once per run by
// the hostgate program (./internal/hostgate/measure) and read here, which
// imports nothing of the project, so that any package's tests can ask.
package hostgate

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
)

// The features, by the names the tests, the report and the table use.
const (
	HardwareCounting = "hardware_counting"
	PreciseSampling  = "precise_sampling"
	Watchpoints      = "watchpoints"
	CacheTopology    = "cache_topology"
	SMT              = "smt"
	CPUHotplug       = "cpu_hotplug"
)

// Features lists every gated feature in the order the table prints them.
var Features = []string{HardwareCounting, PreciseSampling, Watchpoints, CacheTopology, SMT, CPUHotplug}

// Finding is one judge's word on a feature. Known is false where the judge
// cannot tell on this host (no oracle for it here); Present means nothing then.
type Finding struct {
	Known   bool   `json:"known"`
	Present bool   `json:"present"`
	Proof   string `json:"proof"`
}

// Verdict is a feature's two findings.
type Verdict struct {
	Feature string  `json:"feature"`
	Probe   Finding `json:"probe"`
	Oracle  Finding `json:"oracle"`
	// Conflict is a disagreement beyond presence (both find caches, of
	// other sizes): it disputes the verdict as a disagreement on
	// presence does.
	Conflict string `json:"conflict,omitempty"`
}

// State is what a verdict makes of a feature's tests.
type State int

const (
	// Absent: the tests skip, with the proof.
	Absent State = iota
	// Present: the tests must run and pass.
	Present
	// Disputed: probe and oracle disagree, or the probe could not tell: the
	// tests fail, since neither side can be trusted.
	Disputed
)

func (s State) String() string {
	return [...]string{"absent", "present", "DISPUTED"}[s]
}

// State decides: the probe decides where the oracle cannot tell; where both
// can, they must agree.
func (v Verdict) State() State {
	switch {
	case !v.Probe.Known, v.Conflict != "":
		return Disputed
	case v.Oracle.Known && v.Oracle.Present != v.Probe.Present:
		return Disputed
	case v.Probe.Present:
		return Present
	}
	return Absent
}

// Proof says why, in one line: the probe's word and the oracle's.
func (v Verdict) Proof() string {
	oracle := v.Oracle.Proof
	if !v.Oracle.Known {
		oracle = "cannot tell: " + oracle
	}
	p := fmt.Sprintf("probe: %s; oracle: %s", v.Probe.Proof, oracle)
	if v.Conflict != "" {
		p += "; CONFLICT: " + v.Conflict
	}
	return p
}

// Report is one host's verdicts.
type Report struct {
	Host     string    `json:"host"`
	Verdicts []Verdict `json:"verdicts"`
}

// Verdict returns the named feature's verdict.
func (r Report) Verdict(feature string) (Verdict, bool) {
	i := slices.IndexFunc(r.Verdicts, func(v Verdict) bool { return v.Feature == feature })
	if i < 0 {
		return Verdict{}, false
	}
	return r.Verdicts[i], true
}

// Disputed lists the verdicts whose probe and oracle disagree.
func (r Report) Disputed() []Verdict {
	var out []Verdict
	for _, v := range r.Verdicts {
		if v.State() == Disputed {
			out = append(out, v)
		}
	}
	return out
}

// Read reads a report the hostgate program wrote.
func Read(path string) (Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Report{}, fmt.Errorf("host gate: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("host gate %s: %w", path, err)
	}
	for _, f := range Features {
		if _, ok := r.Verdict(f); !ok {
			return Report{}, fmt.Errorf("host gate %s: no verdict on %s", path, f)
		}
	}
	return r, nil
}

// Write writes r as JSON to path.
func (r Report) Write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Outcome is what a gated test did at its gate.
type Outcome string

const (
	// Ran: the feature is present, and the test that needs it ran.
	Ran Outcome = "ran"
	// Skipped: the feature is absent, and the test that needs it skipped.
	Skipped Outcome = "skipped"
	// Followed: the test ran either way, its expectations following the
	// verdict (a probe's expected answer).
	Followed Outcome = "followed"
)

// Use is one gated test's outcome at its gate.
type Use struct {
	Feature, Test string
	Outcome       Outcome
}

// FormatUse is the log line testenv appends for each gated test.
func FormatUse(u Use) string {
	return u.Feature + "\t" + string(u.Outcome) + "\t" + u.Test + "\n"
}

// ParseUses reads the lines FormatUse wrote; a malformed line is an error
// naming it.
func ParseUses(log string) ([]Use, error) {
	var out []Use
	for i, line := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 || !slices.Contains([]Outcome{Ran, Skipped, Followed}, Outcome(f[1])) {
			return nil, fmt.Errorf("gate log line %d: %q is not feature<TAB>ran|skipped|followed<TAB>test", i+1, line)
		}
		out = append(out, Use{Feature: f[0], Test: f[2], Outcome: Outcome(f[1])})
	}
	return out, nil
}

// Table is the end-of-run summary: each feature, its state, how many of its
// gated tests ran, were skipped and followed the verdict (each test once per
// outcome, however often it asked), and the proof.
func Table(r Report, uses []Use) string {
	tests := map[string]map[Outcome]map[string]bool{}
	for _, u := range uses {
		if tests[u.Feature] == nil {
			tests[u.Feature] = map[Outcome]map[string]bool{Ran: {}, Skipped: {}, Followed: {}}
		}
		tests[u.Feature][u.Outcome][u.Test] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Hardware-gated tests on %s:\n", r.Host)
	fmt.Fprintf(&b, "  %-18s %-9s %5s %8s %9s  %s\n", "FEATURE", "STATE", "RAN", "SKIPPED", "FOLLOWED", "PROOF")
	for _, f := range Features {
		v, _ := r.Verdict(f)
		t := tests[f]
		fmt.Fprintf(&b, "  %-18s %-9s %5d %8d %9d  %s\n", f, v.State(), len(t[Ran]), len(t[Skipped]), len(t[Followed]), v.Proof())
	}
	var unknown []string
	for f := range tests {
		if !slices.Contains(Features, f) {
			unknown = append(unknown, f)
		}
	}
	sort.Strings(unknown)
	for _, f := range unknown {
		fmt.Fprintf(&b, "  %-18s tests asked for a feature the gate does not know\n", f)
	}
	return b.String()
}

// Elsewhere is a feature absent here proven on another machine the run
// made for it (QEMU's emulated x86, whose debug registers trap, where this
// guest's do not): where, and what its tests did there.
type Elsewhere struct {
	Feature, Where, Result string
}

// FormatElsewhere is the line scripts/test appends for each.
func FormatElsewhere(e Elsewhere) string {
	return e.Feature + "\t" + e.Where + "\t" + e.Result + "\n"
}

// ParseElsewhere reads the lines FormatElsewhere wrote; a malformed line
// or an unknown feature is an error naming it.
func ParseElsewhere(log string) ([]Elsewhere, error) {
	var out []Elsewhere
	for i, line := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 || !slices.Contains(Features, f[0]) {
			return nil, fmt.Errorf("elsewhere line %d: %q is not feature<TAB>where<TAB>result", i+1, line)
		}
		out = append(out, Elsewhere{Feature: f[0], Where: f[1], Result: f[2]})
	}
	return out, nil
}

// ElsewhereTable says, under Table, where each feature absent here was
// proven instead.
func ElsewhereTable(es []Elsewhere) string {
	if len(es) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Proven elsewhere in this run:\n")
	for _, e := range es {
		fmt.Fprintf(&b, "  %-18s %s: %s\n", e.Feature, e.Where, e.Result)
	}
	return b.String()
}
