package e2e

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/e2e/mutation"
)

var mutationItemRE = regexp.MustCompile(`^- Mode (\d+): `)

// TestMutationCatalogueIsConsistent keeps e2e/MUTANTS.yaml in step with the
// code and with FAILURE_MODEL.md, without running a mutant: every patch
// still applies (its text occurs exactly once), every test it names
// exists, every mode it names is a row of the failure model whose Tests
// column names the tests that kill it, and the failure model's "Mutations"
// section names every mutant of every mode and no mutant that does not
// exist.
func TestMutationCatalogueIsConsistent(t *testing.T) {
	cat, err := mutation.Load("MUTANTS.yaml")
	if err != nil {
		t.Fatal(err)
	}
	funcs := repoTestFuncs(t)
	doc, err := os.ReadFile("FAILURE_MODEL.md")
	if err != nil {
		t.Fatal(err)
	}
	modes := map[int]bool{}
	rows := map[int]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if m := rowRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			modes[n] = true
			rows[n] = line
		}
	}
	section := mutationSection(t, string(doc))
	for n := range modes {
		if _, ok := section[n]; !ok {
			t.Errorf("FAILURE_MODEL.md's Mutations section has no item for mode %d (list its mutants, or say why it has none)", n)
		}
	}
	dir := t.TempDir()
	for _, m := range cat.Mutants {
		if _, err := m.Apply("..", dir); err != nil {
			t.Errorf("%v (update the catalogue with the code)", err)
		}
		for _, k := range m.Kill {
			for _, name := range k.Tests {
				if _, ok := funcs[name]; !ok {
					t.Errorf("mutant %s names %s, which no _test.go file declares", m.ID, name)
				}
			}
		}
		for _, n := range m.Modes {
			if !modes[n] {
				t.Errorf("mutant %s names mode %d, which FAILURE_MODEL.md has no row for", m.ID, n)
			}
			if !strings.Contains(section[n], "`"+m.ID+"`") {
				t.Errorf("FAILURE_MODEL.md's Mutations section does not list mutant %s under mode %d", m.ID, n)
			}
			for _, k := range m.Kill {
				for _, name := range k.Tests {
					if !strings.Contains(rows[n], "`"+name+"`") {
						t.Errorf("FAILURE_MODEL.md's summary row of mode %d does not name %s, which kills its mutant %s", n, name, m.ID)
					}
				}
			}
		}
	}
	ids := map[string]bool{}
	for _, m := range cat.Mutants {
		ids[m.ID] = true
	}
	for n, text := range section {
		for _, id := range regexp.MustCompile("`([a-z0-9]+(?:-[a-z0-9]+)+)`").FindAllStringSubmatch(text, -1) {
			if !ids[id[1]] {
				t.Errorf("FAILURE_MODEL.md's Mutations section names %s under mode %d, which MUTANTS.yaml does not have", id[1], n)
			}
		}
	}
}

// mutationSection returns the "## Mutations" list of FAILURE_MODEL.md by
// mode: one item per mode, "- Mode N: mutants, or why none".
func mutationSection(t *testing.T, doc string) map[int]string {
	t.Helper()
	i := strings.Index(doc, "\n## Mutations\n")
	if i < 0 {
		t.Fatal("FAILURE_MODEL.md has no ## Mutations section")
	}
	rest := doc[i+1:]
	if j := strings.Index(rest[3:], "\n## "); j >= 0 {
		rest = rest[:j+3]
	}
	out := map[int]string{}
	for _, line := range strings.Split(rest, "\n") {
		if m := mutationItemRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			out[n] += line
		}
	}
	if len(out) == 0 {
		t.Fatal("the Mutations section has no items")
	}
	return out
}
