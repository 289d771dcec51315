package flaglist

import (
	"slices"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// Repeated and comma-separated items add up, trimmed, without the empty
// ones; the default is a list too, and giving the flag replaces it.
func TestCommaSeparatedOrRepeated(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"cycles", "instructions"}},
		{[]string{"--x=memory_bound, core_bound", "--x", "retiring,,", "--x= "}, []string{"memory_bound", "core_bound", "retiring"}},
		{[]string{"--x=a"}, []string{"a"}},
	} {
		app := kingpin.New("t", "")
		var got []string
		Var(app.Flag("x", "").Default("cycles, instructions"), &got)
		if _, err := app.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}
