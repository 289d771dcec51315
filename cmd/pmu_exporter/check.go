package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/capability"
	"github.com/pmu-exporter/pmu_exporter/metric"
	"github.com/pmu-exporter/pmu_exporter/sampling"
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

func checkSampling(s setup) samplingStatus {
	st := samplingStatus{Events: []string{}, Missing: []sampling.Missing{}}
	cfgs, missing, err := sampling.Plan(s.pmus, sampling.Options{Period: 10007, LdLat: 30})
	if err != nil {
		st.Error = err.Error()
	}
	for _, c := range cfgs {
		st.Events = append(st.Events, c.PMU+"/"+c.Name)
	}
	st.Missing = append(st.Missing, missing...)
	return st
}

type treeStatus struct {
	Tree   string `json:"tree"`
	Source string `json:"source"`
}

func runCheck(f flags, stdout, stderr io.Writer) int {
	s := discover(f)
	f.topdown = true // check reports what serve does by default
	var tds topdownStatus
	td, err := setupTopdown(f, s)
	// Load (and drop) the cgroup attribution as serve's defaults would.
	f.cgroup, f.cgroupDepth, f.cgroupSeries, f.cgroupTracked = true, 1, 1, 64
	groups := s.groups
	if td != nil {
		groups = append(groups, td.groups...)
	}
	a, feat, _ := setupCgroups(f, s, td, groups)
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
	if f.checkFormat == "json" {
		out := struct {
			capability.Report
			Topdown      topdownStatus  `json:"topdown"`
			Sampling     samplingStatus `json:"memory_sampling"`
			ConfigErrors []string       `json:"config_errors"`
			Groups       []string       `json:"groups"`
		}{Report: s.report, Topdown: tds, Sampling: checkSampling(s), ConfigErrors: []string{}, Groups: []string{}}
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
		if len(tds.Trees) > 0 {
			for _, t := range tds.Trees {
				fmt.Fprintf(stdout, "\nTop-Down: tree %s, from %s", t.Tree, t.Source)
			}
			fmt.Fprintln(stdout)
			for _, w := range tds.Warnings {
				fmt.Fprintf(stdout, "  warning: %s; its events will be multiplexed\n", w)
			}
		} else {
			fmt.Fprintf(stdout, "\nTop-Down: not computed: %s\n", tds.Reason)
		}
		ms := checkSampling(s)
		if len(ms.Events) > 0 {
			fmt.Fprintf(stdout, "\nMemory sampling: %s\n", strings.Join(ms.Events, ", "))
		}
		for _, m := range ms.Missing {
			fmt.Fprintf(stdout, "\nMemory sampling: no %s: %s\n", m.What, m.Why)
		}
		if ms.Error != "" {
			fmt.Fprintf(stdout, "\nMemory sampling: %s\n", ms.Error)
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
