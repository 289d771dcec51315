// Package flaglist gives kingpin a flag that takes a list, comma-separated
// or repeated (toplev's --nodes, perf's -e): each item trimmed, empty ones
// dropped, as it is parsed, so that no caller splits it again.
package flaglist

import (
	"strings"

	"github.com/alecthomas/kingpin/v2"
)

// list is the flag's value: the items into p.
type list struct{ p *[]string }

// Set adds the items of one occurrence of the flag (or of its default).
func (l list) Set(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l.p = append(*l.p, item)
		}
	}
	return nil
}

func (l list) String() string { return strings.Join(*l.p, ",") }

// IsCumulative lets the flag repeat.
func (l list) IsCumulative() bool { return true }

// Var makes fc a list flag into p.
func Var(fc *kingpin.FlagClause, p *[]string) { fc.SetValue(list{p}) }
