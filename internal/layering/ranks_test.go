package layering

import (
	"fmt"
	"strings"
	"testing"
)

// ranks are the top-level folders by how far from the values they sit:
// a package may import its own folder and folders of a lower rank only.
// kernel/ and analysis/ share a rank: the kernel side hands plain values
// (model) up to collector/, which gives them to the math, and neither
// imports the other. internal/ (test support, generators) is not ranked.
var ranks = map[string]int{
	"model":      0,
	"host":       1,
	"formats":    2,
	"kubernetes": 2,
	"plan":       3,
	"kernel":     4,
	"analysis":   4,
	"replay":     5,
	"exporter":   5,
	"collector":  6,
	"cmd":        7,
}

// whereItBelongs says, for an import that points up, where the code that
// needs it belongs.
var whereItBelongs = map[[2]string]string{
	{"kernel", "analysis"}: "kernel/ opens, reads and decodes and hands over plain values (model); what turns them into results belongs in analysis/, and what feeds one to the other in collector/",
	{"host", "analysis"}:   "host/ states the host's facts; a fact analysis/ also needs belongs in host/ (or below), and a choice made from facts in plan/",
}

// folder is a package's top-level folder ("" for the module root).
func folder(path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// TestImportsPointDown: every import between two ranked folders points to
// a lower rank (ranks); every folder with non-test Go code is ranked or
// internal/. (Issue 60 moved the 19 that pointed up when it was written.)
func TestImportsPointDown(t *testing.T) {
	for _, p := range list(t, module+"/...") {
		from := folder(p.ImportPath)
		if from == "internal" || from == "" || len(p.GoFiles) == 0 { // test support, or tests alone
			continue
		}
		rf, ok := ranks[from]
		if !ok {
			t.Errorf("%s: folder %s/ has no rank (internal/layering ranks)", p.ImportPath, from)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := folder(imp)
			rt, ranked := ranks[to]
			if to == from || !ranked || rt < rf {
				continue
			}
			edge := strings.TrimPrefix(p.ImportPath, module+"/") + " -> " + strings.TrimPrefix(imp, module+"/")
			why := whereItBelongs[[2]string{from, to}]
			if why == "" {
				why = fmt.Sprintf("%s/ (rank %d) may import only folders of a lower rank", from, rf)
			}
			t.Errorf("%s points up: %s", edge, why)
		}
	}
}
