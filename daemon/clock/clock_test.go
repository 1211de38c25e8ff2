package clock

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSkew(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"+3h", 3 * time.Hour, false},
		{"-3h", -3 * time.Hour, false},
		{"90m", 90 * time.Minute, false},
		{"soon", 0, true},
	}
	for _, c := range cases {
		got, err := ParseSkew(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseSkew(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestSkewedClockIsOffByItsSkew(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Hour, -3 * time.Hour} {
		off := Skewed{Skew: skew}.Now().Sub(time.Now().Round(0))
		if d := off - skew; d < -time.Second || d > time.Second {
			t.Errorf("Skewed{%v} is off by %v", skew, off)
		}
		// Durations measured on one skewed clock are still right.
		c := Skewed{Skew: skew}
		start := c.Now()
		if el := Since(c, start); el < 0 || el > time.Second {
			t.Errorf("Since on Skewed{%v} = %v", skew, el)
		}
	}
}

// TestLeaseCodeReadsNoProcessClockDirectly keeps the lease-bearing code
// honest: the store (which must use PostgreSQL's now() for every compared
// timestamp) never reads the process clock, and the scheduler and worker
// read it only through a Clock, so the skew injection reaches every reading.
func TestLeaseCodeReadsNoProcessClockDirectly(t *testing.T) {
	forbidden := map[string]bool{"Now": true, "Since": true, "Until": true}
	for _, dir := range []string{"../../core/store", "../scheduler", "../worker"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(compiledFile(t, f))
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && forbidden[sel.Sel.Name] {
					t.Errorf("%s: time.%s reads the process clock directly; use a clock.Clock (or PostgreSQL's now() in the store)", fset.Position(sel.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
}

// compiledFile returns the file the compiler builds for path: under `make
// mutate` (scripts/mutate) a mutant's copy from the go build overlay named
// by FLOWFORGE_MUTATION_OVERLAY, so that this source check sees the mutant
// like the compiler does; otherwise path itself.
func compiledFile(t *testing.T, path string) string {
	t.Helper()
	ov := os.Getenv("FLOWFORGE_MUTATION_OVERLAY")
	if ov == "" {
		return path
	}
	b, err := os.ReadFile(ov)
	if err != nil {
		t.Fatalf("read mutation overlay: %v", err)
	}
	var o struct{ Replace map[string]string }
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("parse mutation overlay %s: %v", ov, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := o.Replace[abs]; ok {
		return r
	}
	return path
}
