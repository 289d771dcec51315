package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/pmu-exporter/pmu_exporter/capability"
)

// topdownStatus says which Top-Down tree serve would compute, or why none.
type topdownStatus struct {
	Tree    string `json:"tree,omitempty"`
	Source  string `json:"source,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Warning string `json:"warning,omitempty"`
}

func runCheck(f flags, stdout, stderr io.Writer) int {
	s := discover(f)
	f.topdown = true // check reports what serve does by default
	var tds topdownStatus
	if td, err := setupTopdown(f, s); err != nil {
		tds.Reason = err.Error()
	} else {
		tds.Tree, tds.Source, tds.Warning = td.info.Uarch, td.info.Source, td.warning
	}
	if f.checkFormat == "json" {
		out := struct {
			capability.Report
			Topdown      topdownStatus `json:"topdown"`
			ConfigErrors []string      `json:"config_errors"`
			Groups       []string      `json:"groups"`
		}{Report: s.report, Topdown: tds, ConfigErrors: []string{}, Groups: []string{}}
		for _, e := range s.configErrors {
			out.ConfigErrors = append(out.ConfigErrors, e.Error())
		}
		for _, g := range s.groups {
			out.Groups = append(out.Groups, g.Name)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	} else {
		s.report.WriteText(stdout)
		if tds.Tree != "" {
			fmt.Fprintf(stdout, "\nTop-Down: tree %s, from %s\n", tds.Tree, tds.Source)
			if tds.Warning != "" {
				fmt.Fprintf(stdout, "  warning: %s; its events will be multiplexed\n", tds.Warning)
			}
		} else {
			fmt.Fprintf(stdout, "\nTop-Down: not computed: %s\n", tds.Reason)
		}
		if len(s.configErrors) > 0 {
			fmt.Fprintf(stdout, "\nConfiguration problems (these groups will not be counted):\n")
			for _, e := range s.configErrors {
				fmt.Fprintf(stdout, "  %v\n", e)
			}
		}
	}
	if !s.report.Runnable {
		return 1
	}
	return 0
}
