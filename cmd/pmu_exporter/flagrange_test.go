package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/pmu-exporter/pmu_exporter/internal/flagrange"
)

// Every numeric flag of every command has a range (internal/flagrange):
// none is one of kingpin's plain numbers, which take any value.
func TestEveryNumericFlagHasARange(t *testing.T) {
	var c cli
	model := newApp(&c, io.Discard).Model()
	plain := regexp.MustCompile(`^\*kingpin\.(u?int[0-9]*|float[0-9]+|duration|bytes)Value$`)
	ranged := 0
	var walk func(cmd string, flags []*kingpin.FlagModel, cmds []*kingpin.CmdModel)
	walk = func(cmd string, flags []*kingpin.FlagModel, cmds []*kingpin.CmdModel) {
		for _, f := range flags {
			if _, ok := f.Value.(flagrange.Bounded); ok {
				ranged++
			} else if typ := fmt.Sprintf("%T", f.Value); plain.MatchString(typ) {
				t.Errorf("%s --%s is a number (%s) without a range: bind it with internal/flagrange", cmd, f.Name, typ)
			}
		}
		for _, sub := range cmds {
			walk(sub.FullCommand, sub.Flags, sub.Commands)
		}
	}
	walk("pmu_exporter", model.Flags, model.Commands)
	if ranged < 40 {
		t.Errorf("%d ranged flags: the walk missed commands", ranged)
	}
}

// The flags a security review found taking any value (issue 56) are
// refused at parse time, before anything starts, exit 2, with the flag
// and its range named.
func TestOutOfRangeFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		flag string // as the error names it
		args []string
	}{
		{"--collector.comm.period=1", []string{"--collector.comm.period=1"}}, {"--collector.comm.period=0", []string{"--collector.comm.period=0"}},
		{"--max-lines=0", []string{"c2c", "--max-lines=0", "x"}}, {"--max-lines=-5", []string{"c2c", "--max-lines=-5", "x"}},
		{"--lines=-1", []string{"c2c", "--lines=-1", "x"}}, {"--lines=-1", []string{"comm", "--lines=-1", "x"}},
		{"--slots=0", []string{"reuse", "--slots", "0"}}, {"--slots=100000", []string{"reuse", "--slots", "100000"}}, {"--period=0", []string{"reuse", "--period", "0"}},
		{"--collector.cgroup.max-series=-1", []string{"--collector.cgroup.max-series=-1"}}, {"--collector.cgroup.max-tracked=-1", []string{"--collector.cgroup.max-tracked=-1"}},
		{"--collector.comm.window=-1", []string{"--collector.comm.window=-1"}},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.flag+": outside the range it takes, [") {
			t.Errorf("%v: exit %d\n%s", c.args, code, errb.String())
		}
	}
}
