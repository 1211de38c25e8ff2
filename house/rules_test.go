package house

import (
	"fmt"
	"go/ast"
	"go/token"
	"sort"
	"strings"
	"testing"
)

// report fails t once for each offence, in the order of their keys, naming
// rule.
func report(t *testing.T, rule string, offences map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(offences))
	for k := range offences {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("%s: %s", offences[k], rule)
	}
}

// TestNoProductionFunctionIsOver80Lines: a function or method of
// production code spans at most 80 lines, its doc comment excluded.
func TestNoProductionFunctionIsOver80Lines(t *testing.T) {
	const limit = 80
	offences := map[string]string{}
	for _, f := range production(moduleFiles(t)) {
		for _, d := range f.file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := f.fset.Position(fd.Pos()), f.fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > limit {
				key := f.rel + ":" + funcName(fd)
				offences[key] = fmt.Sprintf("%s:%d: %s is %d lines", f.rel, start.Line, funcName(fd), n)
			}
		}
	}
	report(t, fmt.Sprintf("no production function over %d lines (cut it by what its parts do)", limit), offences)
}

// funcName is fd's name, with its receiver's type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if g, ok := typ.(*ast.IndexExpr); ok {
		typ = g.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// TestNoProductionFileIsOver500Lines: a file of production code holds at
// most 500 lines; a longer one holds more than one concern.
func TestNoProductionFileIsOver500Lines(t *testing.T) {
	const limit = 500
	offences := map[string]string{}
	for _, f := range production(moduleFiles(t)) {
		if n := f.lines(); n > limit {
			offences[f.rel] = fmt.Sprintf("%s is %d lines", f.rel, n)
		}
	}
	report(t, fmt.Sprintf("no production file over %d lines (cut it by concern, each file with the tests of its concern)", limit), offences)
}

// TestTheCommandLineAndTheDashboardStartNoGoroutine: cli and tui start no
// goroutine of their own (the daemons they run own theirs; the dashboard's
// work runs as Bubble Tea commands).
func TestTheCommandLineAndTheDashboardStartNoGoroutine(t *testing.T) {
	offences := map[string]string{}
	for _, f := range production(moduleFiles(t)) {
		if !under(f.pkg, "cli") && !under(f.pkg, "tui") {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				pos := f.fset.Position(g.Pos())
				offences[fmt.Sprintf("%s:%s", f.rel, enclosingFunc(f.file, g.Pos()))] = fmt.Sprintf("%s:%d: a go statement", f.rel, pos.Line)
			}
			return true
		})
	}
	report(t, "cli and tui start no goroutine", offences)
}

// signalHome is the one function of cli and tui that may call package
// os/signal: the interrupt context every command runs on.
const signalHome = "cli/main.go:interruptContext"

// TestSignalsAreHandledInOnePlace: within cli and tui, only signalHome
// calls package os/signal (Notify, NotifyContext, Stop, Ignore, Reset): a
// command that needs more of an interrupt than its context asks it there.
func TestSignalsAreHandledInOnePlace(t *testing.T) {
	offences := map[string]string{}
	for _, f := range production(moduleFiles(t)) {
		if !under(f.pkg, "cli") && !under(f.pkg, "tui") {
			continue
		}
		name := importName(f.file, "os/signal")
		if name == "" {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
				where := f.rel + ":" + enclosingFunc(f.file, sel.Pos())
				if where != signalHome {
					offences[where] = fmt.Sprintf("%s:%d: signal.%s in %s", f.rel, f.fset.Position(sel.Pos()).Line, sel.Sel.Name, where)
				}
			}
			return true
		})
	}
	report(t, "cli and tui handle signals only in "+signalHome, offences)
}

// importName is the name file refers to import path by ("" when it does
// not import it).
func importName(file *ast.File, path string) string {
	for _, im := range file.Imports {
		if strings.Trim(im.Path.Value, `"`) != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// enclosingFunc names the top-level function of file that holds pos ("" at
// file scope).
func enclosingFunc(file *ast.File, pos token.Pos) string {
	for _, d := range file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Pos() <= pos && pos < fd.End() {
			return funcName(fd)
		}
	}
	return ""
}
