package store_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestThePackageMapNamesEveryFile: doc.go's "Where things are" table has
// one row for each production file of the package and none for a file
// that does not exist, and every test file of the package is named in it
// (in a row, or among the test files of no one file), and only those.
func TestThePackageMapNamesEveryFile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var prod, tests []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			tests = append(tests, f)
		} else {
			prod = append(prod, f)
		}
	}
	var rows []string
	for _, line := range strings.Split(string(src), "\n") {
		cells := strings.Split(strings.TrimPrefix(line, "//\t"), "|")
		if !strings.HasPrefix(line, "//\t") || len(cells) != 3 {
			continue
		}
		if name := strings.TrimSpace(cells[0]); strings.HasSuffix(name, ".go") {
			rows = append(rows, name)
		}
	}
	slices.Sort(rows)
	if missing, extra := differ(prod, rows); len(missing)+len(extra) > 0 || len(rows) != len(prod) {
		t.Errorf("the table lacks a row for %v, has rows for %v that are no production file of the package, or names a file twice (%d rows, %d files)",
			missing, extra, len(rows), len(prod))
	}
	named := regexp.MustCompile(`[a-z0-9_]+_test\.go`).FindAllString(string(src), -1)
	if missing, extra := differ(tests, named); len(missing)+len(extra) > 0 {
		t.Errorf("doc.go does not name the test files %v, and names %v, which do not exist", missing, extra)
	}
}

// differ returns what of want got lacks, and what of got want lacks.
func differ(want, got []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) && !slices.Contains(extra, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}
