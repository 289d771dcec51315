// Package layering holds the test that keeps the tree's data flow one-way:
// only kernel/ (and the binary, and test support) talk to the kernel.
package layering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

const module = "github.com/pmu-exporter/pmu_exporter"

type pkg struct {
	ImportPath, Dir string
	GoFiles, Deps   []string
	Imports         []string
}

func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command(testenv.RequireTool(t, "go"), append([]string{"list", "-json"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// kernelSide are the packages allowed to make syscalls: kernel/, and test
// support (vminit is the init of the emulated arm64 machine the tests run
// in, scripts/arm64-vm; noise is the load scripts/noisy runs tests under;
// hotplugtest notices a CPU going offline under a test; hostgate/measure
// runs the capability probes, as check does, beside the oracles that judge
// them).
func kernelSide(path string) bool {
	rel := strings.TrimPrefix(path, module+"/")
	return strings.HasPrefix(rel, "kernel/") ||
		rel == "internal/testenv" || rel == "internal/layering" || rel == "internal/vminit" || rel == "internal/noise" || rel == "internal/hotplugtest" ||
		rel == "internal/hostgate/measure"
}

// wiring are the packages that may depend on kernel/ without being part of
// it: the collectors, which put its pieces together, and the command line
// that runs them. They make no syscall themselves.
func wiring(path string) bool {
	rel := strings.TrimPrefix(path, module+"/")
	return rel == "collector" || strings.HasPrefix(rel, "collector/") || strings.HasPrefix(rel, "cmd/")
}

// TestOnlyKernelReachesTheKernel: no package outside kernel/ (and test
// support) calls a function of golang.org/x/sys/unix or syscall (their
// constants and types are data, and allowed), the command line and the
// collectors included; and none but the collectors and the command line
// depends on cilium/ebpf or on kernel/ (directly or through another
// package). The math and export layers (analysis, exporter, replay, the
// formats of other tools, Kubernetes naming) take the kernel side's values
// from package model.
func TestOnlyKernelReachesTheKernel(t *testing.T) {
	syscalls := map[string]map[string]bool{}
	for _, p := range list(t, "golang.org/x/sys/unix", "syscall") {
		syscalls[p.ImportPath] = funcs(t, p)
	}
	checked := 0
	for _, p := range list(t, module+"/...") {
		if kernelSide(p.ImportPath) {
			continue
		}
		checked++
		for _, call := range kernelCalls(t, p, syscalls) {
			t.Errorf("%s calls %s: only kernel/ may make syscalls", p.ImportPath, call)
		}
		if wiring(p.ImportPath) {
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, "github.com/cilium/ebpf") || strings.HasPrefix(d, module+"/kernel/") {
				t.Errorf("%s depends on %s: only kernel/ may reach the kernel; take the values from package model", p.ImportPath, d)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d packages checked: is go list finding the module?", checked)
	}
}

// funcs are the package-level functions a package declares.
func funcs(t *testing.T, p pkg) map[string]bool {
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range p.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.IsExported() {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}

// kernelCalls lists the calls of p's files to functions of the syscall
// packages, as file:line pkg.Func.
func kernelCalls(t *testing.T, p pkg, syscalls map[string]map[string]bool) []string {
	var calls []string
	fset := token.NewFileSet()
	for _, f := range p.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{} // local name -> syscall package
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if syscalls[path] == nil {
				continue
			}
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = path
		}
		if len(names) == 0 {
			continue
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && syscalls[names[x.Name]][sel.Sel.Name] {
				calls = append(calls, fset.Position(call.Pos()).String()+" "+x.Name+"."+sel.Sel.Name)
			}
			return true
		})
	}
	return calls
}

// TestOnePerfEventOwner: kernel/perf is the only caller of
// perf_event_open and of the perf ioctls; the sampler and the cgroup program
// go through it (one place to get flags, close-on-exec and errors right).
func TestOnePerfEventOwner(t *testing.T) {
	owner := module + "/kernel/perf"
	found := 0
	for _, p := range list(t, module+"/...") {
		fset := token.NewFileSet()
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "unix" {
					return true
				}
				if name := sel.Sel.Name; name == "PerfEventOpen" || strings.HasPrefix(name, "PERF_EVENT_IOC_") {
					if p.ImportPath == owner {
						found++
					} else {
						t.Errorf("%s uses unix.%s at %s: open and steer events through kernel/perf", p.ImportPath, name, fset.Position(sel.Pos()))
					}
				}
				return true
			})
		}
	}
	if found == 0 {
		t.Error("kernel/perf itself calls no perf_event_open: is the test looking at the right files?")
	}
}

// The tree's shape, as the layout promises it: at most 12 top-level
// folders hold non-test Go code; no non-generated, non-test file outside
// formats/ and internal/ is over 800 lines; no such function outside
// internal/ is over 150 lines, and at most three are over 100 (each a
// table, not a sequence of steps).
func TestTreeShape(t *testing.T) {
	top := map[string]bool{}
	type long struct {
		where string
		lines int
	}
	var over100 []long
	for _, p := range list(t, module+"/...") {
		rel := strings.TrimPrefix(p.ImportPath, module)
		rel = strings.TrimPrefix(rel, "/")
		if len(p.GoFiles) > 0 {
			top[strings.SplitN(rel, "/", 2)[0]] = true
		}
		inFormats := rel == "formats" || strings.HasPrefix(rel, "formats/")
		inInternal := rel == "internal" || strings.HasPrefix(rel, "internal/")
		fset := token.NewFileSet()
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if ast.IsGenerated(file) {
				continue
			}
			if n := fset.File(file.Pos()).LineCount(); n > 800 && !inFormats && !inInternal {
				t.Errorf("%s/%s has %d lines: split it (at most 800 outside formats/ and internal/)", rel, f, n)
			}
			if inInternal {
				continue
			}
			for _, d := range file.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				where := fmt.Sprintf("%s/%s: %s", rel, f, fd.Name.Name)
				if n > 150 {
					t.Errorf("%s has %d lines: at most 150", where, n)
				}
				if n > 100 {
					over100 = append(over100, long{where, n})
				}
			}
		}
	}
	if len(top) > 12 {
		names := make([]string, 0, len(top))
		for n := range top {
			names = append(names, n)
		}
		t.Errorf("%d top-level folders hold non-test Go code, at most 12: %v", len(top), names)
	}
	if len(over100) > 3 {
		t.Errorf("%d functions over 100 lines, at most 3: %v", len(over100), over100)
	}
}
