// Package registry is the list of the exporter's collectors, in the manner of
// node_exporter's registerCollector but as a value, not global state: each
// collector is described once (name, whether it is on by default, the
// capabilities it cannot run without, its own flags), --collector.<name> and
// --no-collector.<name> come from the list, serve and check read the same
// choices from it, and Health reports every collector's latest cycle.
package registry

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/host/capability"
)

// Collector describes one collector; B is what its factories build into
// (the binary's pipeline under construction).
type Collector[B any] struct {
	// Name is its flag and label: --collector.<name>, collector="<name>".
	Name string
	Help string
	// Default is whether it runs without a flag; Required ones always run
	// (others build on them) and have no on/off flag.
	Default, Required bool
	// Needs are the capability features (capability.SystemWide, ...) without
	// which it cannot run: check says so, serve logs it.
	Needs []string
	// Options declares its own flags (--collector.<name>.<option>) on the
	// serve and check commands.
	Options func(o Options)
	// Live sets the collector up on this host's kernel, Replay over a
	// recording (--source=replay); either may be nil where it has no such
	// source. An error means it does not run, and is logged by the caller.
	Live, Replay func(b B) error
}

// Options declares a collector's flags.
type Options struct {
	cmd     *kingpin.CmdClause
	name    string
	aliases *[]*alias
}

// Flag declares --collector.<name>.<opt>; bind gives it its type, default
// and target. A non-empty old is the flag's previous name: still accepted,
// hidden, bound by bind to the same target, and reported by Deprecated. The
// old name has no default of its own: kingpin sets an unset flag's default
// before the values given, so the new name given alone would have been
// added to the old one's default where the flag takes a list
// (--collector.cgroup.events=cycles attributed every default event too).
func (o Options) Flag(opt, old, help string, bind func(*kingpin.FlagClause)) {
	name := "collector." + o.name + "." + opt
	bind(o.cmd.Flag(name, help))
	if old != "" {
		a := &alias{old: old, name: name}
		fc := o.cmd.Flag(old, "Deprecated: --"+name+".").Hidden().IsSetByUser(&a.used)
		bind(fc)
		fc.Default()
		*o.aliases = append(*o.aliases, a)
	}
}

type alias struct {
	old, name string
	used      bool
}

// Deprecated lists the old flag names given on the command line, each with
// its new name, for the log.
func (r *Registry[B]) Deprecated() []string {
	var notes []string
	for _, a := range r.aliases {
		if a.used {
			notes = append(notes, "--"+a.old+" is deprecated: use --"+a.name)
		}
	}
	return notes
}

// Registry is the exporter's collectors, in the order they are set up.
type Registry[B any] struct {
	list    []Collector[B]
	enabled map[string]*bool
	aliases []*alias
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// New lists the collectors; names must be unique and fit a flag and a label.
func New[B any](cs ...Collector[B]) (*Registry[B], error) {
	r := &Registry[B]{enabled: map[string]*bool{}}
	for _, c := range cs {
		if !validName.MatchString(c.Name) {
			return nil, fmt.Errorf("collector %q: a name is lower case letters, digits and _", c.Name)
		}
		if r.enabled[c.Name] != nil {
			return nil, fmt.Errorf("collector %q registered twice", c.Name)
		}
		on := c.Default || c.Required
		r.enabled[c.Name] = &on
		r.list = append(r.list, c)
	}
	return r, nil
}

// Bind declares --collector.<name> for every optional collector (kingpin
// adds --no-collector.<name>) and every collector's own options on cmd.
// Bind the same registry on several commands (serve, check) and they share
// the choices.
func (r *Registry[B]) Bind(cmd *kingpin.CmdClause) {
	for _, c := range r.list {
		if !c.Required {
			def := "disabled"
			if c.Default {
				def = "enabled"
			}
			cmd.Flag("collector."+c.Name, fmt.Sprintf("%s (default: %s).", c.Help, def)).
				Default(fmt.Sprint(c.Default)).BoolVar(r.enabled[c.Name])
		}
		if c.Options != nil {
			c.Options(Options{cmd: cmd, name: c.Name, aliases: &r.aliases})
		}
	}
}

// Enabled says whether the named collector runs (false for a name not
// registered).
func (r *Registry[B]) Enabled(name string) bool {
	on := r.enabled[name]
	return on != nil && *on
}

// Set switches a collector on or off, as its flag does.
func (r *Registry[B]) Set(name string, on bool) error {
	p := r.enabled[name]
	if p == nil {
		return fmt.Errorf("no collector %q", name)
	}
	for _, c := range r.list {
		if c.Name == name && c.Required && !on {
			return fmt.Errorf("collector %q is required", name)
		}
	}
	*p = on
	return nil
}

// Collectors lists them, in registration order.
func (r *Registry[B]) Collectors() []Collector[B] { return slices.Clone(r.list) }

// Build sets up every enabled collector in order, with its Live or its
// Replay factory, and returns the names of those that run and the failures
// of the others (by name). Later collectors may use what earlier ones built.
func (r *Registry[B]) Build(b B, replay bool) (running []string, failed map[string]error) {
	failed = map[string]error{}
	for _, c := range r.list {
		if !r.Enabled(c.Name) {
			continue
		}
		factory := c.Live
		if replay {
			factory = c.Replay
		}
		if factory == nil {
			continue
		}
		if err := factory(b); err != nil {
			failed[c.Name] = err
			continue
		}
		running = append(running, c.Name)
	}
	return running, failed
}

// UnavailableError is a collector that cannot run on this host for a
// reason check names (no Top-Down tree for this CPU, no precise sampler,
// no platform PMU; in replay, nothing recorded for it): not a failure.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return e.Reason }

// Unavailable says a collector cannot run here, and why.
func Unavailable(format string, a ...any) error {
	return &UnavailableError{Reason: fmt.Sprintf(format, a...)}
}

// IsUnavailable says whether err is (or wraps) an UnavailableError.
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// Status is a collector as check reports it.
type Status struct {
	Name    string   `json:"name"`
	Enabled bool     `json:"enabled"`
	Runs    bool     `json:"runs"`             // enabled and nothing it needs is missing
	Missing []string `json:"missing"`          // needed features this host lacks
	Reason  string   `json:"reason,omitempty"` // why it does not run, where the caller knows more
}

// Statuses judges every collector against a capability report.
func (r *Registry[B]) Statuses(rep capability.Report) []Status {
	var out []Status
	for _, c := range r.list {
		st := Status{Name: c.Name, Enabled: r.Enabled(c.Name), Missing: []string{}}
		for _, n := range c.Needs {
			if !rep.Feature(n).Available {
				st.Missing = append(st.Missing, n)
			}
		}
		st.Runs = st.Enabled && len(st.Missing) == 0
		out = append(out, st)
	}
	return out
}
