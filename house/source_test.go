package house

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is the import path of the module's root (go.mod).
const modulePath = "github.com/flowforge/flowforge"

// sourceFile is one parsed Go file of the module.
type sourceFile struct {
	rel  string // path from the module root, slash-separated
	pkg  string // import path of its directory
	test bool   // a _test.go file
	fset *token.FileSet
	file *ast.File
}

// lines is the file's length in lines.
func (f sourceFile) lines() int {
	return f.fset.File(f.file.Pos()).LineCount()
}

// imports returns the file's import paths.
func (f sourceFile) imports() []string {
	out := make([]string, 0, len(f.file.Imports))
	for _, im := range f.file.Imports {
		out = append(out, strings.Trim(im.Path.Value, `"`))
	}
	return out
}

// moduleFiles parses every Go file of the module (not of the modules
// nested in it, such as scripts/bench, nor testdata), once per test binary.
func moduleFiles(t *testing.T) []sourceFile {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []sourceFile
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || hasGoMod(p)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pkg := modulePath
		if dir := path.Dir(rel); dir != "." {
			pkg += "/" + dir
		}
		out = append(out, sourceFile{rel: rel, pkg: pkg, test: strings.HasSuffix(p, "_test.go"), fset: fset, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("found only %d Go files under %s: is the walk broken?", len(out), root)
	}
	return out
}

// hasGoMod reports whether dir holds a go.mod (a module of its own).
func hasGoMod(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// production returns the files that are not tests.
func production(files []sourceFile) []sourceFile {
	var out []sourceFile
	for _, f := range files {
		if !f.test {
			out = append(out, f)
		}
	}
	return out
}

// under reports whether import path pkg is dir (a module-relative
// directory such as "core/store") or below it.
func under(pkg, dir string) bool {
	full := modulePath + "/" + dir
	return pkg == full || strings.HasPrefix(pkg, full+"/")
}
