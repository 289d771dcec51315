package metric

import (
	"os"
	"testing"
)

// FuzzExtend: a definitions file (--definitions, --collector.topdown.
// definitions) of any bytes, over a built-in tree or alone, gives a tree
// or a UserError naming the file, never a panic; a tree that compiles
// evaluates on any inputs.
func FuzzExtend(f *testing.F) {
	for _, name := range []string{"testdata/software.yaml", "../defs/spr.yaml", "../defs/neoverse.yaml"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("metrics:\n  - {name: retiring, level: 1, formula: \"1 / 0\"}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	base, err := os.ReadFile("testdata/software.yaml")
	if err != nil {
		f.Fatal(err)
	}
	baseDef, err := Parse("software.yaml", base)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, over := range []*Definition{nil, baseDef} {
			_, tree, err := Extend(over, "user.yaml", data)
			if err != nil {
				if _, ok := err.(*UserError); !ok {
					t.Fatalf("%T %v: not a UserError naming the file", err, err)
				}
				continue
			}
			ev := tree.NewEvaluator()
			for i := range tree.Inputs {
				ev.Set(i, float64(i))
			}
			ev.Eval()
		}
	})
}
