package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	src := `# extra events
default_profile: false
groups:
  - name: frontend
    events:
      - cycles
      - cpu/event=0x9c,umask=0x1,name=idq_uops_not_delivered/
events:
  - page-faults:u
`
	cfg, err := Parse("pmu.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultProfile || len(cfg.Groups) != 2 {
		t.Fatalf("cfg = %+v", cfg)
	}
	g := cfg.Groups[0]
	if g.Name != "frontend" || len(g.Events) != 2 || g.Events[1].Spec.PMU != "cpu" || g.Events[1].Pos.String() != "pmu.yml:7:9" {
		t.Errorf("group = %+v", g)
	}
	if s := cfg.Groups[1]; s.Name != "page-faults:u" || s.Events[0].Spec.Modifiers != "u" || s.Pos.Line != 9 {
		t.Errorf("standalone event = %+v", s)
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	cfg, err := Parse("empty.yml", nil)
	if err != nil || !cfg.DefaultProfile || len(cfg.Groups) != 0 {
		t.Errorf("cfg = %+v, %v", cfg, err)
	}
}

func TestParseErrorsNameFileLineColumn(t *testing.T) {
	src := `default_profile: maybe
groups:
  - name: ok
    events: [cycles]
  - name: "bad name!"
    events: [cycles]
  - name: typo
    evnets: [cycles]
  - name: ok
    events: [instructions]
  - name: badspec
    events:
      - cpu/event=0x3c
      - 42
events:
  - cycles:q
colour: blue
`
	cfg, err := Parse("pmu.yml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"pmu.yml:1:18: default_profile must be true or false",
		`pmu.yml:5:11: group name "bad name!" must be`,
		`pmu.yml:8:5: unknown group key "evnets" (known: name, events)`,
		`pmu.yml:7:5: group "typo" lists no events`,
		`pmu.yml:9:5: group "ok" is defined twice`,
		`pmu.yml:13:9: event "cpu/event=0x3c": missing closing '/'`,
		"pmu.yml:14:9: an event must be a string",
		`pmu.yml:16:5: event "cycles:q": unknown modifier 'q'`,
		`pmu.yml:17:1: unknown key "colour"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	// What was valid is kept.
	if len(cfg.Groups) != 1 || cfg.Groups[0].Name != "ok" {
		t.Errorf("valid groups kept: %+v", cfg.Groups)
	}
}

func TestParseNotYAML(t *testing.T) {
	_, err := Parse("pmu.yml", []byte("groups: [\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "pmu.yml: not valid YAML: yaml: line") {
		t.Errorf("err = %v", err)
	}
	_, err = Parse("pmu.yml", []byte("- cycles\n"))
	if err == nil || !strings.Contains(err.Error(), "pmu.yml:1:1: the top level must be a mapping") {
		t.Errorf("err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yml")
	os.WriteFile(p, []byte("events: [cs]\n"), 0o644)
	if cfg, err := Load(p); err != nil || cfg.Groups[0].Events[0].Pos.String() != p+":1:10" {
		t.Errorf("Load = %+v, %v", cfg, err)
	}
	if _, err := Load(p + ".missing"); err == nil || !strings.Contains(err.Error(), "reading config") {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("groups:\n  - name: a\n    events: [cycles]\n"))
	f.Add([]byte("events: [cpu/event=1/]\ndefault_profile: true\n"))
	f.Add([]byte("groups: [{name: x, events: [1, {a: b}]}]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse("f.yml", b)
		if cfg == nil {
			t.Fatal("nil config")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "f.yml") {
			t.Fatalf("error without position: %v", err)
		}
	})
}
