package collector

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/analysis/topdown"
)

// The level flag's help names each built-in tree's depth as the trees
// have it.
func TestTreeLevelsHelp(t *testing.T) {
	depths, err := topdown.Depths()
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]string, len(depths))
	for i, d := range depths {
		parts[i] = fmt.Sprintf("%d (%s)", d.Levels, strings.Join(d.Trees, ", "))
	}
	if want := "Built-in trees' levels: " + strings.Join(parts, "; "); treeLevelsHelp != want {
		t.Errorf("treeLevelsHelp is\n%s\nthe trees say\n%s", treeLevelsHelp, want)
	}
}
