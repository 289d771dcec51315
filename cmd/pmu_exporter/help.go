package main

import (
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/alecthomas/kingpin/v2"
)

// judges are the commands that take every collector flag serve takes, to
// judge what serve would run: their --help lists their own flags, and
// --help-long the collectors' too.
var judges = []string{"check", "validate"}

// helpTemplate is kingpin's default usage, with check's and validate's
// collector flags left to --help-long, and the exporter's (serve's) flags
// summarised by group under the top-level --help, since serve is the
// default command.
var helpTemplate = strings.Replace(strings.Replace(kingpin.DefaultUsageTemplate,
	"{{.Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}\n",
	"{{.Context.Flags|OwnFlags .Context.SelectedCommand|FlagsToTwoColumns|FormatTwoColumns}}\n{{.Context.SelectedCommand|JudgeNote}}", 1),
	"Commands:\n{{template \"FormatCommands\" .App}}\n",
	"Commands:\n{{template \"FormatCommands\" .App}}\n{{.App|ServeGroups}}", 1)

// helpFuncs are the helpers helpTemplate calls.
var helpFuncs = template.FuncMap{
	"OwnFlags": func(cmd *kingpin.CmdModel, flags []*kingpin.FlagModel) []*kingpin.FlagModel {
		if cmd == nil || !slices.Contains(judges, cmd.FullCommand) {
			return flags
		}
		return slices.DeleteFunc(slices.Clone(flags), collectorFlag)
	},
	"JudgeNote": func(cmd *kingpin.CmdModel) string {
		if cmd == nil || !slices.Contains(judges, cmd.FullCommand) {
			return ""
		}
		return fmt.Sprintf("It takes every --collector.* flag serve takes, to judge the collectors serve would run: pmu_exporter %s --help-long lists them.\n\n", cmd.FullCommand)
	},
	"ServeGroups": serveGroups,
}

// collectorFlag says whether a flag chooses or tunes a collector.
func collectorFlag(f *kingpin.FlagModel) bool {
	return strings.HasPrefix(f.Name, "collector.")
}

// serveGroups lists serve's flags by group (--web.*, --collector.comm.*
// ...) with how many each holds, for the top-level --help: serve is what
// pmu_exporter runs with no command.
func serveGroups(app *kingpin.ApplicationModel) string {
	var serve *kingpin.CmdModel
	for _, c := range app.Commands {
		if c.Default {
			serve = c
		}
	}
	if serve == nil {
		return ""
	}
	count := map[string]int{}
	var order []string
	for _, f := range serve.Flags {
		if f.Hidden {
			continue
		}
		parts := strings.SplitN(f.Name, ".", 3)
		group := "--" + parts[0] + ".*"
		switch {
		case len(parts) == 1: // --source
			group = "--" + f.Name
		case parts[0] == "collector" && len(parts) == 3:
			group = "--collector." + parts[1] + ".*"
		case parts[0] == "collector": // --collector.comm, --collector.cycle-timeout
			group = "--collector.<name> (each collector on or off) and --collector.cycle-timeout"
		}
		if count[group] == 0 {
			order = append(order, group)
		}
		count[group]++
	}
	var b strings.Builder
	b.WriteString("The exporter's flags (serve, the default command), by group; pmu_exporter serve --help gives each:\n")
	for _, g := range order {
		fmt.Fprintf(&b, "  %s: %d\n", g, count[g])
	}
	return b.String()
}
