// Package gatecheck finds the tests that need a host feature the host gate
// judges (internal/hostgate: watchpoints that fire, cache topology in
// sysfs, hardware counting, ...) and never ask the gate about it. Such a
// test passes on the machines it was written on and fails on the others of
// the pool (a guest whose debug registers do not fire, one without
// /sys/devices/system/cpu/cpu*/cache), so that nothing lands from them.
//
// It reads the source, not the running tests: each function of a
// package's _test.go files leaves markers (a string literal it holds, a
// function of another package it calls, an identifier it names), and each
// Test function collects those of every test helper it reaches. A Rule says
// which markers mean a feature is needed; a call of testenv.RequireFeature
// or testenv.HasFeature with hostgate's constant for it, in the test or
// any helper it reaches, gates it. Test helpers are followed within their
// package and into internal/testenv (testenv.HotplugCPU gates on CPU
// hotplug); the product's own code is not followed, since it handles a
// missing feature itself and the test's expectation is what has to follow
// the gate.
package gatecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Rule says that a test needs Feature when the markers it reaches match
// every one of All (regular expressions over markers, see Marker), and it
// lives in a package whose directory (relative to the module's root, with
// slashes) matches Packages, where that is set.
type Rule struct {
	Feature  string
	All      []*regexp.Regexp
	Packages *regexp.Regexp
	// Own: only the markers of the test's own body (its closures too)
	// count, not its helpers': for what a shared helper does on one of its
	// paths only (it counts instructions where the flags name them).
	Own bool
	// Why is said of a test found to need the feature without its gate.
	Why string
}

// Marker kinds, the prefixes of the markers a function leaves:
//
//	lit:VALUE            a string literal (unquoted)
//	call:PATH.NAME       a call of a package-level function of another
//	                     package (or, in a package's own tests, of its own:
//	                     PATH is then the package's import path)
//	call:PATH.NAME(ARG   the same, with its first argument's string literal
//	ref:PATH.NAME        a qualified identifier named (a constant, a type)
const (
	Lit  = "lit:"
	Call = "call:"
	Ref  = "ref:"
)

// Finding is one test that needs a feature and does not ask the gate.
type Finding struct {
	// Test is the package directory and the test's name (kernel/watch.TestX).
	Test     string
	Pos      token.Position
	Feature  string
	Why      string
	Evidence string // the markers that matched
}

func (f Finding) String() string {
	return fmt.Sprintf("%s (%s): needs %s (%s: %s) but never asks testenv.RequireFeature or HasFeature for it", f.Test, f.Pos, f.Feature, f.Why, f.Evidence)
}

// Module is a parsed module: its path and, by directory, its packages'
// functions.
type Module struct {
	Path     string
	features map[string]string // hostgate's constant names → feature names
	funcs    map[funcKey]*function
	// methods maps a directory and a method's name to its declarations.
	methods map[string]map[string][]funcKey
	// dirs maps an import path to its directory, relative to Root.
	dirs map[string]string
}

// funcKey names a function: its directory, whether it is declared in a
// _test.go file, and its name (methods as Recv.Name).
type funcKey struct {
	dir  string
	test bool
	name string
}

// function is what one function's body says, before following its calls.
type function struct {
	key     funcKey
	pos     token.Position
	isTest  bool // func TestX(t *testing.T) in a _test.go file
	markers []string
	gates   []string  // features asked of the gate
	calls   []funcKey // functions of the same directory it names or calls
	methods []string  // method names it calls on values (followed loosely)
	testenv []funcKey // internal/testenv functions it calls
}

// Load parses every Go file of the module rooted at root (go.mod's
// directory), but for testdata, vendor and hidden directories.
// hostgateDir is the directory (relative to root) whose constants name the
// features (internal/hostgate).
func Load(root, hostgateDir string) (*Module, error) {
	modPath, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	m := &Module{Path: modPath, funcs: map[funcKey]*function{}, methods: map[string]map[string][]funcKey{}, dirs: map[string]string{}}
	fset := token.NewFileSet()
	files := map[string][]*ast.File{}
	names := map[*ast.File]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("gatecheck: %w", err)
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		files[rel] = append(files[rel], f)
		names[f] = path
		return nil
	})
	if err != nil {
		return nil, err
	}
	for dir := range files {
		m.dirs[importPath(modPath, dir)] = dir
	}
	if m.features, err = featureNames(files[hostgateDir]); err != nil {
		return nil, err
	}
	for dir, fs := range files {
		for _, f := range fs {
			m.addFile(fset, dir, strings.HasSuffix(names[f], "_test.go"), f)
		}
	}
	return m, nil
}

func importPath(module, dir string) string {
	if dir == "." {
		return module
	}
	return module + "/" + dir
}

// modulePath reads the module line of root/go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("gatecheck: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`), nil
		}
	}
	return "", fmt.Errorf("gatecheck: %s/go.mod has no module line", root)
}

// featureNames reads hostgate's string constants: name → value.
func featureNames(files []*ast.File) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						out[n.Name] = v
					}
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gatecheck: no feature constants in the host gate's package")
	}
	return out, nil
}

// addFile records each function of f.
func (m *Module) addFile(fset *token.FileSet, dir string, test bool, f *ast.File) {
	imports := map[string]string{} // local name → import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
	}
	own := importPath(m.Path, dir)
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) > 0 {
			if m.methods[dir] == nil {
				m.methods[dir] = map[string][]funcKey{}
			}
			m.methods[dir][name] = append(m.methods[dir][name], funcKey{dir, test, recvName(fd.Recv.List[0].Type) + "." + name})
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		fn := &function{key: funcKey{dir, test, name}, pos: fset.Position(fd.Pos())}
		fn.isTest = test && fd.Recv == nil && strings.HasPrefix(name, "Test") && isTestingT(fd.Type)
		m.scan(fn, fd.Body, own, imports)
		m.funcs[fn.key] = fn
	}
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// isTestingT: one parameter, *testing.T.
func isTestingT(ft *ast.FuncType) bool {
	if ft.Params == nil || len(ft.Params.List) != 1 {
		return false
	}
	star, ok := ft.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "T" && isIdent(sel.X, "testing")
}

// identName is id's name, "" for none.
func identName(id *ast.Ident) string {
	if id == nil {
		return ""
	}
	return id.Name
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// scan walks a body for markers, gates and the calls to follow.
func (m *Module) scan(fn *function, body ast.Node, own string, imports map[string]string) {
	selected := map[*ast.Ident]bool{} // the names after a dot: not this package's
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				if v, err := strconv.Unquote(x.Value); err == nil {
					fn.markers = append(fn.markers, Lit+v)
				}
			}
		case *ast.SelectorExpr:
			selected[x.Sel] = true
			if id, ok := x.X.(*ast.Ident); ok {
				if p, ok := imports[id.Name]; ok {
					fn.markers = append(fn.markers, Ref+p+"."+x.Sel.Name)
				}
			}
		case *ast.Ident:
			// A function of the same directory named, called or passed
			// as a value.
			if !selected[x] {
				fn.calls = append(fn.calls, funcKey{fn.key.dir, true, x.Name}, funcKey{fn.key.dir, false, x.Name})
			}
		case *ast.CallExpr:
			m.scanCall(fn, x, own, imports)
		}
		return true
	})
}

// scanCall records a call's markers, and its gate where it asks one.
func (m *Module) scanCall(fn *function, call *ast.CallExpr, own string, imports map[string]string) {
	var path, name string
	switch f := call.Fun.(type) {
	case *ast.Ident:
		path, name = own, f.Name
	case *ast.SelectorExpr:
		id, _ := f.X.(*ast.Ident)
		if p, isPkg := imports[identName(id)]; isPkg {
			path, name = p, f.Sel.Name
		} else {
			fn.methods = append(fn.methods, f.Sel.Name)
			return
		}
	default:
		return
	}
	fn.markers = append(fn.markers, Call+path+"."+name)
	if len(call.Args) > 0 {
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, _ := strconv.Unquote(lit.Value)
			fn.markers = append(fn.markers, Call+path+"."+name+"("+v)
		}
	}
	dir, inModule := m.dirs[path]
	if !inModule {
		return
	}
	if strings.HasSuffix(path, "/internal/testenv") {
		fn.testenv = append(fn.testenv, funcKey{dir, false, name})
		if (name == "RequireFeature" || name == "HasFeature") && len(call.Args) == 2 {
			if f, ok := m.featureArg(call.Args[1], imports); ok {
				fn.gates = append(fn.gates, f)
			}
		}
	}
}

// featureArg reads hostgate.X (or a literal) as a feature's name.
func (m *Module) featureArg(e ast.Expr, imports map[string]string) (string, bool) {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok && strings.HasSuffix(imports[id.Name], "/internal/hostgate") {
			v, ok := m.features[x.Sel.Name]
			return v, ok
		}
	case *ast.Ident:
		v, ok := m.features[x.Name]
		return v, ok
	case *ast.BasicLit:
		v, err := strconv.Unquote(x.Value)
		return v, err == nil
	}
	return "", false
}

// reach collects the markers and gates of fn and of every function of its
// test files (and internal/testenv) it reaches.
func (m *Module) reach(fn *function) (markers, gates map[string]bool) {
	return m.reachFrom(fn, true)
}

// own collects fn's own markers.
func own(fn *function) map[string]bool {
	out := map[string]bool{}
	for _, mk := range fn.markers {
		out[mk] = true
	}
	return out
}

// reachFrom collects fn's markers and gates and, where follow is set, those
// of every function of its test files (and internal/testenv) it reaches.
func (m *Module) reachFrom(fn *function, follow bool) (markers, gates map[string]bool) {
	markers, gates = map[string]bool{}, map[string]bool{}
	seen := map[funcKey]bool{}
	var visit func(f *function, inTestenv bool)
	visit = func(f *function, inTestenv bool) {
		if seen[f.key] {
			return
		}
		seen[f.key] = true
		for _, g := range f.gates {
			gates[g] = true
		}
		if !inTestenv {
			for _, mk := range f.markers {
				markers[mk] = true
			}
		}
		if !follow {
			return
		}
		follow := func(k funcKey) {
			if g, ok := m.funcs[k]; ok && (g.key.test || inTestenv) {
				visit(g, inTestenv)
			}
		}
		for _, k := range f.calls {
			follow(k)
		}
		for _, name := range f.methods {
			for _, k := range m.methods[f.key.dir][name] {
				follow(k)
			}
		}
		for _, k := range f.testenv {
			if g, ok := m.funcs[k]; ok {
				visit(g, true)
			}
		}
	}
	visit(fn, false)
	return markers, gates
}

// Check lists every test that needs a feature by rules and reaches no gate
// for it, in a stable order.
func (m *Module) Check(rules []Rule) []Finding {
	var out []Finding
	for _, fn := range m.funcs {
		if !fn.isTest {
			continue
		}
		markers, gates := m.reach(fn)
		for _, r := range rules {
			if gates[r.Feature] || r.Packages != nil && !r.Packages.MatchString(fn.key.dir) {
				continue
			}
			if ev, ok := matchAll(r.All, pick(r, markers, fn)); ok {
				out = append(out, Finding{Test: fn.key.dir + "." + fn.key.name, Pos: fn.pos, Feature: r.Feature, Why: r.Why, Evidence: ev})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Test < out[j].Test || out[i].Test == out[j].Test && out[i].Feature < out[j].Feature
	})
	return out
}

// Needs lists, for each feature, the tests that need it by rules, gated or
// not: the list the gate's uses are held against.
func (m *Module) Needs(rules []Rule) map[string][]string {
	out := map[string][]string{}
	for _, fn := range m.funcs {
		if !fn.isTest {
			continue
		}
		markers, _ := m.reach(fn)
		for _, r := range rules {
			if r.Packages != nil && !r.Packages.MatchString(fn.key.dir) {
				continue
			}
			if _, ok := matchAll(r.All, pick(r, markers, fn)); ok && !slices.Contains(out[r.Feature], fn.key.dir+"."+fn.key.name) {
				out[r.Feature] = append(out[r.Feature], fn.key.dir+"."+fn.key.name)
			}
		}
	}
	for _, ts := range out {
		sort.Strings(ts)
	}
	return out
}

// pick is the markers a rule reads: the test's own, or all it reaches.
func pick(r Rule, reached map[string]bool, fn *function) map[string]bool {
	if r.Own {
		return own(fn)
	}
	return reached
}

// matchAll finds, for each expression, a marker it matches; the evidence
// names them.
func matchAll(all []*regexp.Regexp, markers map[string]bool) (string, bool) {
	var ev []string
	for _, re := range all {
		var hit []string
		for mk := range markers {
			if re.MatchString(mk) {
				hit = append(hit, mk)
			}
		}
		if len(hit) == 0 {
			return "", false
		}
		sort.Strings(hit)
		ev = append(ev, hit[0])
	}
	return strings.Join(ev, " + "), true
}
