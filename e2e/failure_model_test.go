package e2e

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	testNameRE = regexp.MustCompile("`(Test[A-Za-z0-9_]+|Benchmark[A-Za-z0-9_]+)`")
	rowRE      = regexp.MustCompile(`^\|\s*(\d+)\s*\|`)
)

// repoTestFuncs returns every Test*/Benchmark* function declared in the
// repository's _test.go files.
func repoTestFuncs(t *testing.T) map[string]string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				rel, _ := filepath.Rel(root, path)
				funcs[fn.Name.Name] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

// TestFailureModelNamesOnlyTestsThatExist keeps e2e/FAILURE_MODEL.md honest:
// every summary row has a status of exactly Verified, Partially verified or
// UNVERIFIED; a Verified row names at least one test; and every test the
// document names (in backticks) exists in the repository.
func TestFailureModelNamesOnlyTestsThatExist(t *testing.T) {
	f, err := os.Open("FAILURE_MODEL.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	funcs := repoTestFuncs(t)
	rows := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		for _, m := range testNameRE.FindAllStringSubmatch(text, -1) {
			if _, ok := funcs[m[1]]; !ok {
				t.Errorf("FAILURE_MODEL.md:%d names %s, which no _test.go file declares", line, m[1])
			}
		}
		if !rowRE.MatchString(text) {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(strings.TrimSpace(text), "|"), "|")
		status := strings.TrimSpace(cells[len(cells)-1])
		switch status {
		case "Verified", "Partially verified", "UNVERIFIED":
		default:
			t.Errorf("FAILURE_MODEL.md:%d: status %q is not Verified, Partially verified or UNVERIFIED", line, status)
		}
		if status == "Verified" && !testNameRE.MatchString(text) {
			t.Errorf("FAILURE_MODEL.md:%d: a Verified row must name its tests", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows == 0 {
		t.Fatal("FAILURE_MODEL.md has no summary rows")
	}
}
