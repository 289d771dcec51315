// Package config reads the --config.file YAML, in which users list events and
// event groups to count on top of (or instead of) the built-in profile. It checks
// syntax only — keys, types, names, and each event spec's grammar — and every error
// carries file:line:column. Resolving events against the host's PMUs is package
// profile's job.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"gopkg.in/yaml.v3"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
)

// Config is a parsed configuration file.
type Config struct {
	// DefaultProfile keeps the built-in event groups (default true).
	DefaultProfile bool
	Groups         []Group
}

// Group is a named set of events counted together.
type Group struct {
	Name   string
	Events []Event
	Pos    Pos
}

// Event is one event spec and where it was written.
type Event struct {
	Spec eventspec.Spec
	Pos  Pos
}

// Pos is a place in a file.
type Pos struct {
	File         string
	Line, Column int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is a problem at a position.
type Error struct {
	Pos Pos
	Err error
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// groupName is what a group name may be: it becomes a label value and part of log
// lines, so keep it plain.
var groupName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,64}$`)

// Load reads and parses a file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(path, b)
}

// Parse parses YAML data read from file. It returns a Config holding everything
// that is valid together with the joined errors for what is not, so a caller can
// keep counting the good groups.
func Parse(file string, data []byte) (*Config, error) {
	cfg := &Config{DefaultProfile: true}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, nil // an empty file is the default configuration
		}
		return cfg, &Error{Pos: Pos{File: file}, Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	p := parser{file: file}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		p.fail(root, "the top level must be a mapping with default_profile, groups and events")
		return cfg, errors.Join(p.errs...)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "default_profile":
			if err := v.Decode(&cfg.DefaultProfile); err != nil || v.Tag != "!!bool" {
				p.fail(v, "default_profile must be true or false")
			}
		case "groups":
			for _, g := range p.seq(v, "groups") {
				if grp, ok := p.group(g); ok {
					cfg.Groups = p.addGroup(cfg.Groups, grp, seen)
				}
			}
		case "events":
			// Each listed event is its own group, multiplexed independently (as perf
			// stat does for events outside {}), named after the spec.
			for _, e := range p.seq(v, "events") {
				if ev, ok := p.event(e); ok {
					cfg.Groups = p.addGroup(cfg.Groups, Group{Name: ev.Spec.Text, Events: []Event{ev}, Pos: ev.Pos}, seen)
				}
			}
		default:
			p.fail(k, fmt.Sprintf("unknown key %q (known: default_profile, groups, events)", k.Value))
		}
	}
	return cfg, errors.Join(p.errs...)
}

type parser struct {
	file string
	errs []error
}

func (p *parser) pos(n *yaml.Node) Pos { return Pos{File: p.file, Line: n.Line, Column: n.Column} }

func (p *parser) fail(n *yaml.Node, msg string) {
	p.errs = append(p.errs, &Error{Pos: p.pos(n), Err: errors.New(msg)})
}

func (p *parser) seq(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		p.fail(n, what+" must be a list")
		return nil
	}
	return n.Content
}

func (p *parser) addGroup(groups []Group, g Group, seen map[string]bool) []Group {
	if seen[g.Name] {
		p.errs = append(p.errs, &Error{Pos: g.Pos, Err: fmt.Errorf("group %q is defined twice", g.Name)})
		return groups
	}
	seen[g.Name] = true
	return append(groups, g)
}

func (p *parser) group(n *yaml.Node) (Group, bool) {
	g := Group{Pos: p.pos(n)}
	if n.Kind != yaml.MappingNode {
		p.fail(n, "a group must be a mapping with name and events")
		return g, false
	}
	ok := true
	var hasEvents bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			if v.Kind != yaml.ScalarNode || !groupName.MatchString(v.Value) {
				p.fail(v, fmt.Sprintf("group name %q must be 1-64 characters of [A-Za-z0-9_.:/-]", v.Value))
				ok = false
			}
			g.Name = v.Value
		case "events":
			hasEvents = true
			for _, e := range p.seq(v, "a group's events") {
				if ev, good := p.event(e); good {
					g.Events = append(g.Events, ev)
				} else {
					ok = false
				}
			}
		default:
			p.fail(k, fmt.Sprintf("unknown group key %q (known: name, events)", k.Value))
			ok = false
		}
	}
	if g.Name == "" && ok {
		p.fail(n, "group has no name")
		ok = false
	}
	if !hasEvents || (len(g.Events) == 0 && ok) {
		p.fail(n, fmt.Sprintf("group %q lists no events", g.Name))
		ok = false
	}
	return g, ok
}

func (p *parser) event(n *yaml.Node) (Event, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		p.fail(n, "an event must be a string such as cycles or cpu/event=0x3c/")
		return Event{}, false
	}
	spec, err := eventspec.Parse(n.Value)
	if err != nil {
		p.errs = append(p.errs, &Error{Pos: p.pos(n), Err: err})
		return Event{}, false
	}
	return Event{Spec: spec, Pos: p.pos(n)}, true
}
