package capability

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the report for a person: the host, the PMUs, then every feature
// with, where missing, the reason and the fix.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "CPU:        %s (vendor %s, family %s, model %s, stepping %s)\n", r.ModelName, r.Vendor, r.Family, r.Model, r.Stepping)
	fmt.Fprintf(&b, "Hypervisor: %v\n", yesNo(r.Hypervisor))
	fmt.Fprintf(&b, "Online:     CPUs %s\n", r.OnlineCPUs)
	paranoid := "unknown"
	if r.Paranoid != nil {
		paranoid = fmt.Sprint(*r.Paranoid)
	}
	fmt.Fprintf(&b, "Kernel:     perf_event_paranoid=%s, perf_event_max_sample_rate=%d, nmi_watchdog=%s\n", paranoid, r.MaxSample, onOff(r.NMIWatchdog))
	caps := strings.Join(r.Caps, ", ")
	if caps == "" {
		caps = "none of CAP_PERFMON, CAP_BPF, CAP_SYS_ADMIN"
	}
	fmt.Fprintf(&b, "Privilege:  %s\n", caps)
	fmt.Fprintf(&b, "Cgroups:    %s\n", r.Cgroup)
	if r.Counters.Known {
		fmt.Fprintf(&b, "Counters:   %d general-purpose, %d fixed per CPU (%s)\n", r.Counters.GeneralPurpose, r.Counters.Fixed, r.Counters.Source)
	} else {
		fmt.Fprintf(&b, "Counters:   unknown: %s\n", r.Counters.Source)
	}
	b.WriteString("\nPMUs:\n")
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tTYPE\tCORE\tEVENTS\tMAX_PRECISE\tCPUS")
	for _, p := range r.PMUs {
		cpus := p.CPUs
		if cpus == "" {
			cpus = "all"
		}
		mp := p.MaxPrecise
		if mp == "" {
			mp = "-"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\t%s\n", p.Name, p.Type, yesNo(p.Core), p.Events, mp, cpus)
	}
	tw.Flush()
	b.WriteString("\nFeatures:\n")
	for _, f := range r.Features {
		if f.Available {
			fmt.Fprintf(&b, "  [yes] %-19s %s\n", f.Name, f.Detail)
			continue
		}
		fmt.Fprintf(&b, "  [no]  %-19s %s\n", f.Name, f.Reason)
		if f.Fix != "" {
			fmt.Fprintf(&b, "        %-19s fix: %s\n", "", f.Fix)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	if r.Runnable {
		b.WriteString("\nThe exporter can run here and will export what is marked [yes].\n")
	} else {
		b.WriteString("\nThe exporter cannot count anything system-wide here; see system_wide above.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
