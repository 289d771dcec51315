// Package eventspec turns the event names perf users already write ("cycles",
// "L1-dcache-load-misses", "cpu/event=0x3c,umask=0x0,cmask=1,edge/",
// "cpu/topdown-retiring/", "ibs_op//", "r01c2", "cycles:u") into perf_event_attr
// field values, resolving pmu/term/ specs through the PMU's sysfs format files and
// aliases. It is pure: the PMU descriptions come from package pmu, and the kernel
// is only asked later, by kernel/perf.
package eventspec

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host/pmu"
)

// Attr holds the perf_event_attr fields an event spec decides.
type Attr struct {
	Type                       uint32
	Config, Config1, Config2   uint64
	ExcludeUser, ExcludeKernel bool
	ExcludeHV, ExcludeHost     bool
	ExcludeGuest, Pinned       bool
	PreciseIP                  uint8 // 0..3, from :p, :pp, :ppp
}

// Event is one resolved event, ready to open.
type Event struct {
	Spec string // as the user wrote it
	Name string // the event label: the name= term, else Spec
	PMU  string // the PMU label: "software", "cpu", "cpu_core", ...
	Attr Attr
	// CPUs restricts where the event can count (hybrid PMUs, uncore cpumask);
	// nil means every online CPU.
	CPUs  []int
	Scale float64 // from the alias's .scale, else 1
	Unit  string
}

// Spec is the syntax of one event specification, before resolution.
type Spec struct {
	Text      string
	PMU       string // "" for a bare name
	Name      string // bare name ("cycles", "r01c2", an alias); "" for pmu/terms/
	Terms     []Term
	Modifiers string
}

// Term is one term of pmu/term=value,.../.
type Term struct {
	Key      string
	Value    string
	HasValue bool
}

// Error is a spec error; its message names the spec and what is wrong.
type Error struct {
	Spec string
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("event %q: %s", e.Spec, e.Msg) }

func errorf(spec, format string, args ...any) error {
	return &Error{Spec: spec, Msg: fmt.Sprintf(format, args...)}
}

const modifierLetters = "ukhGHpD"

// Parse checks the syntax of one spec without looking at the host's PMUs.
func Parse(text string) (Spec, error) {
	s := Spec{Text: text}
	t := strings.TrimSpace(text)
	if t == "" {
		return s, errorf(text, "empty event")
	}
	if i := strings.IndexByte(t, '/'); i >= 0 {
		j := strings.LastIndexByte(t, '/')
		if j == i {
			return s, errorf(text, "missing closing '/' (the form is pmu/term=value,.../)")
		}
		s.PMU = t[:i]
		if !validName(s.PMU) {
			return s, errorf(text, "PMU name %q has characters outside [A-Za-z0-9_.-]", s.PMU)
		}
		terms, err := parseTerms(text, t[i+1:j])
		if err != nil {
			return s, err
		}
		s.Terms = terms
		s.Modifiers = strings.TrimPrefix(t[j+1:], ":")
	} else {
		name, mods, _ := strings.Cut(t, ":")
		if strings.Contains(mods, ":") {
			return s, errorf(text, "more than one ':' (tracepoints are not counting events here)")
		}
		if !validName(name) {
			return s, errorf(text, "%q is not an event name", name)
		}
		s.Name, s.Modifiers = name, mods
	}
	for _, m := range s.Modifiers {
		if !strings.ContainsRune(modifierLetters, m) {
			return s, errorf(text, "unknown modifier %q; modifiers are u (user), k (kernel), h (hypervisor), G (guest), H (host), p/pp/ppp (precise), D (pinned)", m)
		}
	}
	if n := strings.Count(s.Modifiers, "p"); n > 3 {
		return s, errorf(text, "precise level %d is beyond the maximum 3 (ppp)", n)
	}
	return s, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}

func parseTerms(spec, s string) ([]Term, error) {
	var terms []Term
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, has := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !validName(k) {
			return nil, errorf(spec, "term %q is not of the form name or name=value", part)
		}
		if has && v == "" {
			return nil, errorf(spec, "term %q has no value after '='", k)
		}
		terms = append(terms, Term{Key: k, Value: v, HasValue: has})
	}
	return terms, nil
}

// Resolve parses text and resolves it against the host's PMUs. A generic hardware
// event on a hybrid host becomes one Event per core PMU, each restricted to that
// PMU's CPUs, as perf does.
func Resolve(text string, pmus []*pmu.PMU) ([]Event, error) {
	s, err := Parse(text)
	if err != nil {
		return nil, err
	}
	return s.Resolve(pmus)
}

// Resolve resolves a parsed spec against the host's PMUs.
func (s Spec) Resolve(pmus []*pmu.PMU) ([]Event, error) {
	var evs []Event
	var err error
	if s.PMU != "" {
		p := find(pmus, s.PMU)
		if p == nil {
			return nil, errorf(s.Text, "no PMU named %q on this host; PMUs here: %s", s.PMU, strings.Join(pmuNames(pmus), ", "))
		}
		var ev Event
		ev, err = encodeTerms(s.Text, p, s.Terms)
		evs = []Event{ev}
	} else {
		evs, err = resolveName(s, pmus)
	}
	if err != nil {
		return nil, err
	}
	for i := range evs {
		applyModifiers(&evs[i].Attr, s.Modifiers)
		evs[i].Spec = s.Text
		if evs[i].Name == "" {
			evs[i].Name = strings.TrimSpace(s.Text)
		}
	}
	return evs, nil
}

func resolveName(s Spec, pmus []*pmu.PMU) ([]Event, error) {
	if n, ok := softwareEvents[s.Name]; ok {
		return []Event{{PMU: "software", Attr: Attr{Type: pmu.TypeSoftware, Config: n}, Scale: 1}}, nil
	}
	if n, ok := hardwareEvents[s.Name]; ok {
		return generic(pmu.TypeHardware, n, pmus), nil
	}
	if n, ok := cacheEvent(s.Name); ok {
		return generic(pmu.TypeHWCache, n, pmus), nil
	}
	if raw, ok := rawEvent(s.Name); ok {
		cores := corePMUs(pmus)
		if len(cores) == 0 {
			return []Event{{PMU: "cpu", Attr: Attr{Type: pmu.TypeRaw, Config: raw}, Scale: 1}}, nil
		}
		var evs []Event
		for _, p := range cores {
			evs = append(evs, Event{PMU: p.Name, Attr: Attr{Type: p.Type, Config: raw}, CPUs: p.CPUs, Scale: 1})
		}
		return evs, nil
	}
	// A bare alias name ("topdown-retiring", "inst_retired"), looked up on core PMUs.
	var evs []Event
	for _, p := range corePMUs(pmus) {
		if _, ok := p.Aliases[s.Name]; ok {
			ev, err := encodeTerms(s.Text, p, []Term{{Key: s.Name}})
			if err != nil {
				return nil, err
			}
			evs = append(evs, ev)
		}
	}
	if len(evs) > 0 {
		return evs, nil
	}
	msg := fmt.Sprintf("unknown event %q", s.Name)
	if near := nearest(s.Name, knownNames(pmus)); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return nil, errorf(s.Text, "%s (generic names: %s; or use pmu/term=value/, see 'pmu_exporter check' for the PMUs here)",
		msg, strings.Join(sortedKeys(hardwareEvents, softwareEvents), ", "))
}

// generic builds a PERF_TYPE_HARDWARE or PERF_TYPE_HW_CACHE event. On hybrid hosts
// the target PMU's type goes in config bits 32-63 (PERF_PMU_TYPE_SHIFT).
func generic(typ uint32, config uint64, pmus []*pmu.PMU) []Event {
	cores := corePMUs(pmus)
	if len(cores) <= 1 {
		name := "cpu"
		if len(cores) == 1 {
			name = cores[0].Name
		}
		return []Event{{PMU: name, Attr: Attr{Type: typ, Config: config}, Scale: 1}}
	}
	evs := make([]Event, 0, len(cores))
	for _, p := range cores {
		evs = append(evs, Event{PMU: p.Name, Attr: Attr{Type: typ, Config: config | uint64(p.Type)<<32}, CPUs: p.CPUs, Scale: 1})
	}
	return evs
}

func cacheEvent(name string) (uint64, bool) {
	for cache, id := range cacheIDs {
		rest, ok := strings.CutPrefix(name, cache+"-")
		if !ok {
			continue
		}
		if op, ok := cacheOps[rest]; ok {
			return id | op[0]<<8 | op[1]<<16, true
		}
	}
	return 0, false
}

func rawEvent(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, "r")
	if !ok || hex == "" || len(hex) > 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return v, err == nil
}

// encodeTerms resolves pmu/terms/ on p. Alias terms expand first, so explicit
// terms written after them override the alias's values.
func encodeTerms(spec string, p *pmu.PMU, terms []Term) (Event, error) {
	ev := Event{PMU: p.Name, Attr: Attr{Type: p.Type}, CPUs: p.CPUs, Scale: 1}
	if p.CPUs == nil && p.CPUMask != nil {
		ev.CPUs = p.CPUMask
	}
	values := map[string]uint64{}
	var order []string
	set := func(k string, v uint64) {
		if _, seen := values[k]; !seen {
			order = append(order, k)
		}
		values[k] = v
	}
	for _, t := range terms {
		if !t.HasValue {
			if a, ok := p.Aliases[t.Key]; ok {
				sub, err := parseTerms(spec, a.Terms)
				if err != nil {
					return ev, errorf(spec, "alias %s/%s/ has bad terms %q", p.Name, t.Key, a.Terms)
				}
				for _, st := range sub {
					v, err := termValue(spec, st)
					if err != nil {
						return ev, err
					}
					set(st.Key, v)
				}
				ev.Scale, ev.Unit = a.Scale, a.Unit
				continue
			}
		}
		if t.Key == "name" {
			if !t.HasValue {
				return ev, errorf(spec, "term name needs a value")
			}
			ev.Name = t.Value
			continue
		}
		if t.Key == "period" || t.Key == "freq" || t.Key == "call-graph" || t.Key == "stack-size" {
			return ev, errorf(spec, "term %q is for sampling; counting events take no sampling terms", t.Key)
		}
		v, err := termValue(spec, t)
		if err != nil {
			return ev, err
		}
		set(t.Key, v)
	}
	words := [3]*uint64{&ev.Attr.Config, &ev.Attr.Config1, &ev.Attr.Config2}
	for _, k := range order {
		v := values[k]
		switch k {
		case "config":
			ev.Attr.Config = v
			continue
		case "config1":
			ev.Attr.Config1 = v
			continue
		case "config2":
			ev.Attr.Config2 = v
			continue
		}
		f, ok := p.Formats[k]
		if !ok {
			msg := fmt.Sprintf("unknown term %q for PMU %s; it accepts: %s", k, p.Name, strings.Join(p.TermNames(), ", "))
			if aliases := p.AliasNames(); len(aliases) > 0 {
				msg += "; named events: " + strings.Join(aliases, ", ")
			}
			return ev, errorf(spec, "%s", msg)
		}
		if f.Word > 2 {
			return ev, errorf(spec, "term %q lives in config%d, which this exporter cannot pass to the kernel yet", k, f.Word)
		}
		bits, err := f.Encode(v)
		if err != nil {
			return ev, errorf(spec, "term %s: %v", k, err)
		}
		mask, _ := f.Encode(1<<f.Width() - 1)
		if f.Width() >= 64 {
			mask = ^uint64(0)
		}
		*words[f.Word] = *words[f.Word]&^mask | bits
	}
	return ev, nil
}

func termValue(spec string, t Term) (uint64, error) {
	if !t.HasValue {
		return 1, nil // a flag term such as "edge" or "inv"
	}
	v, err := strconv.ParseUint(t.Value, 0, 64)
	if err != nil {
		return 0, errorf(spec, "term %s: value %q is not a number (decimal or 0x hex)", t.Key, t.Value)
	}
	return v, nil
}

// applyModifiers follows perf: naming any of u/k/h excludes the privilege levels
// not named; G/H restrict to guest/host; each p raises precise_ip.
func applyModifiers(a *Attr, mods string) {
	if strings.ContainsAny(mods, "ukh") {
		a.ExcludeUser = !strings.Contains(mods, "u")
		a.ExcludeKernel = !strings.Contains(mods, "k")
		a.ExcludeHV = !strings.Contains(mods, "h")
	}
	if strings.Contains(mods, "G") && !strings.Contains(mods, "H") {
		a.ExcludeHost = true
	}
	if strings.Contains(mods, "H") && !strings.Contains(mods, "G") {
		a.ExcludeGuest = true
	}
	a.PreciseIP = uint8(strings.Count(mods, "p"))
	a.Pinned = strings.Contains(mods, "D")
}

func find(pmus []*pmu.PMU, name string) *pmu.PMU {
	for _, p := range pmus {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func corePMUs(pmus []*pmu.PMU) []*pmu.PMU {
	var out []*pmu.PMU
	for _, p := range pmus {
		if p.IsCore() {
			out = append(out, p)
		}
	}
	return out
}

func pmuNames(pmus []*pmu.PMU) []string {
	var out []string
	for _, p := range pmus {
		out = append(out, p.Name)
	}
	return out
}

func sortedKeys(ms ...map[string]uint64) []string {
	var out []string
	for _, m := range ms {
		for k := range m {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func knownNames(pmus []*pmu.PMU) []string {
	names := sortedKeys(hardwareEvents, softwareEvents)
	for _, p := range corePMUs(pmus) {
		names = append(names, p.AliasNames()...)
	}
	for c := range cacheIDs {
		for op := range cacheOps {
			names = append(names, c+"-"+op)
		}
	}
	return names
}

// nearest returns the known name within edit distance 2 of s, if any.
func nearest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := distance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
