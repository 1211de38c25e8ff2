// Command mutate is `make mutate`: it applies each mutant of the mutation
// catalogue (e2e/MUTANTS.yaml) in turn, through `go test -overlay` so the
// working tree is never written, runs only the tests the catalogue names for
// it (without -race), and fails listing every mutant that survived — a
// mutant survives when any test named for it still passes. Binaries that e2e
// tests build (harness.BuildGo) get the same overlay through the
// environment variable FLOWFORGE_MUTATION_OVERLAY.
//
//	go run ./scripts/mutate [-catalogue e2e/MUTANTS.yaml] [-only id,id] [-list]
//
// Exit status: 0 every mutant killed, 1 a mutant survived or could not be
// built or applied, 2 bad usage or an unreadable catalogue.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
	"github.com/flowforge/flowforge/e2e/mutation"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("catalogue", "e2e/MUTANTS.yaml", "the mutation catalogue")
	only := fs.String("only", "", "comma-separated mutant ids to run (default: all)")
	list := fs.Bool("list", false, "list the mutants and exit")
	timeout := fs.Duration("timeout", 2*time.Minute, "go test -timeout for each package run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	cat, err := mutation.Load(filepath.Join(root, *path))
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	selected, err := selectMutants(cat.Mutants, *only)
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	if *list {
		for _, m := range selected {
			fmt.Fprintf(stdout, "%-40s modes %v: %s\n", m.ID, m.Modes, m.Mechanism)
		}
		return 0
	}
	tmp, err := os.MkdirTemp("", "ff-mutants-")
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	defer os.RemoveAll(tmp)

	start := time.Now()
	var bad []string
	for i, m := range selected {
		t0 := time.Now()
		verdict, detail := runMutant(ctx, root, tmp, m, *timeout)
		fmt.Fprintf(stdout, "mutate: [%d/%d] %-40s %-8s %5.1fs %s\n", i+1, len(selected), m.ID, verdict, time.Since(t0).Seconds(), detail)
		if verdict != "killed" {
			bad = append(bad, m.ID+" ("+verdict+")")
		}
	}
	fmt.Fprintf(stdout, "mutate: %d mutants, %d killed, %d not, in %s\n", len(selected), len(selected)-len(bad), len(bad), time.Since(start).Round(time.Second))
	if len(bad) > 0 {
		fmt.Fprintf(stdout, "mutate: FAILED: these mutants were not killed: %s\n", strings.Join(bad, ", "))
		return 1
	}
	return 0
}

func selectMutants(all []mutation.Mutant, only string) ([]mutation.Mutant, error) {
	if only == "" {
		return all, nil
	}
	byID := map[string]mutation.Mutant{}
	for _, m := range all {
		byID[m.ID] = m
	}
	var out []mutation.Mutant
	for _, id := range strings.Split(only, ",") {
		m, ok := byID[strings.TrimSpace(id)]
		if !ok {
			return nil, fmt.Errorf("-only: no mutant %q in the catalogue", id)
		}
		out = append(out, m)
	}
	return out, nil
}

// runMutant returns "killed", "SURVIVED" or "BROKEN" and a detail line.
func runMutant(ctx context.Context, root, tmp string, m mutation.Mutant, timeout time.Duration) (string, string) {
	dir := filepath.Join(tmp, m.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "BROKEN", err.Error()
	}
	overlay, err := m.Apply(root, dir)
	if err != nil {
		return "BROKEN", err.Error()
	}
	ovPath := filepath.Join(dir, "overlay.json")
	b, _ := json.Marshal(map[string]any{"Replace": overlay})
	if err := os.WriteFile(ovPath, b, 0o644); err != nil {
		return "BROKEN", err.Error()
	}
	var survivors []string
	for _, k := range m.Kill {
		res, out, err := goTest(ctx, root, ovPath, k, timeout)
		if err != nil {
			return "BROKEN", fmt.Sprintf("%s: %v\n%s", k.Pkg, err, tail(out, 30))
		}
		for _, name := range k.Tests {
			switch res[name] {
			case "fail":
			case "":
				return "BROKEN", fmt.Sprintf("%s: test %s did not run (does it exist?)\n%s", k.Pkg, name, tail(out, 30))
			default:
				survivors = append(survivors, name+" "+res[name])
			}
		}
	}
	if len(survivors) > 0 {
		return "SURVIVED", "still green: " + strings.Join(survivors, ", ")
	}
	return "killed", ""
}

// goTest runs the named tests of one package under the overlay and returns
// each top-level test's final action ("pass", "fail", "skip").
func goTest(ctx context.Context, root, overlay string, k mutation.Kill, timeout time.Duration) (map[string]string, []byte, error) {
	pattern := "^(" + strings.Join(k.Tests, "|") + ")$"
	args := []string{"test", "-overlay=" + overlay, "-count=1", "-json", "-timeout=" + timeout.String(), "-run", pattern}
	if len(k.Tests) == 1 {
		// One test to turn red: stop at its first failing subtest.
		args = append(args, "-failfast")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, k.Pkg)...)
	cmd.Dir = root
	cmd.Env = append(withoutFFCTLBin(os.Environ()), harness.MutationOverlayEnv+"="+overlay)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	runErr := cmd.Run()
	res := map[string]string{}
	var text bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	built := false
	started := map[string]bool{}
	for sc.Scan() {
		var ev struct {
			Action, Test, Output string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			text.Write(sc.Bytes())
			text.WriteByte('\n')
			continue
		}
		text.WriteString(ev.Output)
		if ev.Action == "run" {
			built = true
			if ev.Test != "" && !strings.Contains(ev.Test, "/") {
				started[ev.Test] = true
			}
		}
		if ev.Test != "" && !strings.Contains(ev.Test, "/") {
			switch ev.Action {
			case "pass", "fail", "skip":
				res[ev.Test] = ev.Action
			}
		}
	}
	// A test that started and never ended took its test binary down with
	// it (a panic, an os.Exit): the mutant was caught.
	for name := range started {
		if res[name] == "" {
			res[name] = "fail"
		}
	}
	if !built {
		var ee *exec.ExitError
		if runErr != nil && !errors.As(runErr, &ee) {
			return nil, text.Bytes(), runErr
		}
		return nil, text.Bytes(), errors.New("the mutant does not build, or no test ran")
	}
	return res, text.Bytes(), nil
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// withoutFFCTLBin drops FFCTL_BIN: a prebuilt ffctl would not carry the
// mutant.
func withoutFFCTLBin(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FFCTL_BIN=") {
			out = append(out, kv)
		}
	}
	return out
}
