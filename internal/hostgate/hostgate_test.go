package hostgate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func finding(known, present bool) Finding { return Finding{Known: known, Present: present, Proof: "p"} }

// Present and absent where the probe and oracle agree, or the oracle cannot
// tell; disputed where they disagree, where the probe cannot tell, or where
// both find the feature but describe it differently.
func TestState(t *testing.T) {
	for _, c := range []struct {
		probe, oracle Finding
		conflict      string
		want          State
	}{
		{finding(true, true), finding(true, true), "", Present},
		{finding(true, false), finding(true, false), "", Absent},
		{finding(true, true), finding(false, false), "", Present},
		{finding(true, false), finding(false, true), "", Absent},
		{finding(true, true), finding(true, false), "", Disputed},
		{finding(true, false), finding(true, true), "", Disputed},
		{finding(false, false), finding(true, true), "", Disputed},
		{finding(true, true), finding(true, true), "L1d 32 KiB against 48 KiB", Disputed},
	} {
		v := Verdict{Feature: Watchpoints, Probe: c.probe, Oracle: c.oracle, Conflict: c.conflict}
		if got := v.State(); got != c.want {
			t.Errorf("%+v: %v, want %v", v, got, c.want)
		}
	}
}

func report() Report {
	r := Report{Host: "test host"}
	for _, f := range Features {
		r.Verdicts = append(r.Verdicts, Verdict{Feature: f, Probe: finding(true, f == Watchpoints), Oracle: Finding{Proof: "none here"}})
	}
	return r
}

// A report survives its file; a file that lacks a feature, or is not
// JSON, is refused naming the file.
func TestReadWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "v.json")
	if err := report().Write(p); err != nil {
		t.Fatal(err)
	}
	r, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Verdict(Watchpoints); !ok || v.State() != Present {
		t.Errorf("watchpoints: %+v", v)
	}
	short := report()
	short.Verdicts = short.Verdicts[1:]
	short.Write(p)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "no verdict on "+Features[0]) {
		t.Errorf("a report without %s: %v", Features[0], err)
	}
	os.WriteFile(p, []byte("{"), 0o644)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("not JSON: %v", err)
	}
}

// The table counts each gated test once per feature, however often it
// asked, and prints every feature with its proof.
func TestTable(t *testing.T) {
	var log string
	for _, u := range []Use{
		{Watchpoints, "kernel/watch.TestA", Ran},
		{Watchpoints, "kernel/watch.TestA", Ran},
		{Watchpoints, "cmd/pmu_exporter.TestB", Ran},
		{Watchpoints, "kernel/probe.TestD", Followed},
		{CacheTopology, "host.TestC", Skipped},
	} {
		log += FormatUse(u)
	}
	uses, err := ParseUses(log)
	if err != nil {
		t.Fatal(err)
	}
	table := Table(report(), uses)
	for _, want := range []string{
		"watchpoints        present       2        0         1  probe: p; oracle: cannot tell: none here",
		"cache_topology     absent        0        1         0",
		"hardware_counting  absent        0        0         0",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("no %q in\n%s", want, table)
		}
	}
	if _, err := ParseUses("watchpoints\tmaybe\tx\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a malformed line: %v", err)
	}
}

// Where a feature absent here was proven instead is read back as written
// and said under the table; a line of an unknown feature is refused.
func TestElsewhere(t *testing.T) {
	e := Elsewhere{Watchpoints, "QEMU TCG -cpu max, vmlinuz-6.1.0-56-amd64", "./kernel/watch: 12 passed, 0 failed, 0 skipped"}
	es, err := ParseElsewhere(FormatElsewhere(e))
	if err != nil || len(es) != 1 || es[0] != e {
		t.Fatalf("%v, %v", es, err)
	}
	if want := "  watchpoints        QEMU TCG -cpu max, vmlinuz-6.1.0-56-amd64: ./kernel/watch: 12 passed"; !strings.Contains(ElsewhereTable(es), want) {
		t.Errorf("no %q in\n%s", want, ElsewhereTable(es))
	}
	if ElsewhereTable(nil) != "" {
		t.Error("a table of nothing proven elsewhere")
	}
	if _, err := ParseElsewhere("wings\there\tok\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("an unknown feature: %v", err)
	}
}
