// Package mutation reads the mutation catalogue (e2e/MUTANTS.yaml): for every
// mechanism a Verified row of e2e/FAILURE_MODEL.md relies on, a small source
// patch that takes exactly that mechanism away, and the tests that must go
// red when it is gone. scripts/mutate applies each patch through `go test
// -overlay` (the working tree is never written) and fails when a mutant
// survives; TestMutationCatalogueIsConsistent checks the catalogue against
// the failure model and the repository without running anything.
package mutation

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Catalogue is the parsed e2e/MUTANTS.yaml.
type Catalogue struct {
	Mutants []Mutant `yaml:"mutants"`
}

// Mutant takes one mechanism away.
type Mutant struct {
	// ID is a short kebab-case name, unique in the catalogue
	// ("claim-without-token").
	ID string `yaml:"id"`
	// Modes are the failure-model mode numbers whose Verified status relies
	// on the mechanism.
	Modes []int `yaml:"modes"`
	// Mechanism says in one sentence what the patch removes.
	Mechanism string `yaml:"mechanism"`
	// Patches are applied together; each From must occur exactly once in
	// its file, so a catalogue that no longer matches the code fails loudly
	// instead of testing nothing.
	Patches []Patch `yaml:"patches"`
	// Kill lists the tests that must each fail under the mutant, by package.
	Kill []Kill `yaml:"kill"`
}

// Patch replaces one exact, unique piece of text in one file.
type Patch struct {
	// File is relative to the repository root.
	File string `yaml:"file"`
	From string `yaml:"from"`
	To   string `yaml:"to"`
}

// Kill names tests of one package (a ./-relative import path such as
// "./core/store").
type Kill struct {
	Pkg   string   `yaml:"pkg"`
	Tests []string `yaml:"tests"`
}

var idRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Load reads and validates the catalogue at path: ids unique and
// kebab-case, at least one mode, patch and kill test per mutant. It does not
// look at the source files (see Apply).
func Load(path string) (*Catalogue, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mutation catalogue: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c Catalogue
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse mutation catalogue %s: %w", path, err)
	}
	seen := map[string]bool{}
	var errs []error
	for i, m := range c.Mutants {
		where := fmt.Sprintf("mutant %d (%s)", i+1, m.ID)
		switch {
		case !idRE.MatchString(m.ID):
			errs = append(errs, fmt.Errorf("%s: id must be kebab-case", where))
		case seen[m.ID]:
			errs = append(errs, fmt.Errorf("%s: duplicate id", where))
		}
		seen[m.ID] = true
		if len(m.Modes) == 0 || strings.TrimSpace(m.Mechanism) == "" || len(m.Patches) == 0 {
			errs = append(errs, fmt.Errorf("%s: needs modes, a mechanism and at least one patch", where))
		}
		for _, p := range m.Patches {
			if p.File == "" || p.From == "" || p.From == p.To {
				errs = append(errs, fmt.Errorf("%s: a patch needs a file and a From that differs from To", where))
			}
		}
		n := 0
		for _, k := range m.Kill {
			if !strings.HasPrefix(k.Pkg, "./") {
				errs = append(errs, fmt.Errorf("%s: kill package %q must start with ./", where, k.Pkg))
			}
			n += len(k.Tests)
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("%s: names no test that kills it", where))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("mutation catalogue %s: %w", path, err)
	}
	return &c, nil
}

// Apply writes the mutated copies of m's files into dir and returns the
// overlay map (absolute source path → mutated copy) for `go build -overlay`.
// root is the repository root. It fails when a From does not occur exactly
// once.
func (m Mutant) Apply(root, dir string) (map[string]string, error) {
	files := map[string]string{}
	var order []string
	for _, p := range m.Patches {
		abs := filepath.Join(root, filepath.FromSlash(p.File))
		src, ok := files[abs]
		if !ok {
			b, err := os.ReadFile(abs)
			if err != nil {
				return nil, fmt.Errorf("mutant %s: %w", m.ID, err)
			}
			src = string(b)
			order = append(order, abs)
		}
		if n := strings.Count(src, p.From); n != 1 {
			return nil, fmt.Errorf("mutant %s: %s: the text to replace occurs %d times (want exactly 1): %q", m.ID, p.File, n, p.From)
		}
		files[abs] = strings.Replace(src, p.From, p.To, 1)
	}
	overlay := map[string]string{}
	for i, abs := range order {
		out := filepath.Join(dir, fmt.Sprintf("%s-%d-%s", m.ID, i, filepath.Base(abs)))
		if err := os.WriteFile(out, []byte(files[abs]), 0o644); err != nil {
			return nil, fmt.Errorf("mutant %s: %w", m.ID, err)
		}
		overlay[abs] = out
	}
	return overlay, nil
}

// Tests returns every test name the catalogue relies on.
func (c *Catalogue) Tests() []string {
	var out []string
	for _, m := range c.Mutants {
		for _, k := range m.Kill {
			out = append(out, k.Tests...)
		}
	}
	return out
}
