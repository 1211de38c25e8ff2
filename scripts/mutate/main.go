// Command mutate is `make mutate`: it applies each mutant of the mutation
// catalogue (e2e/MUTANTS.yaml) in turn, through `go test -overlay` so the
// working tree is never written, runs only the tests the catalogue names for
// it (without -race), and fails listing every mutant that survived — a
// mutant survives when any test named for it still passes. Binaries that e2e
// tests build (harness.BuildGo) get the same overlay through the
// environment variable FLOWFORGE_MUTATION_OVERLAY. Mutants whose tests
// are not e2e's run -jobs at a time (default 2: most of a mutant's time is
// its package's build); the e2e ones then run one at a time (runAll). Each
// job has a directory of its own per mutant for the patched files, and a
// database of its own for storetest's schemas (FLOWFORGE_TEST_SCHEMA_DATABASE:
// flowforge_test_job1, _job2, ...), so that what PostgreSQL shares between
// the schemas of one database (advisory locks, notification channels) is
// never shared by two mutants running at once. An id given twice to -only
// runs twice.
//
//	go run ./scripts/mutate [-catalogue e2e/MUTANTS.yaml] [-only id,id] [-jobs N] [-list]
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

	"github.com/flowforge/flowforge/core/store/storetest"
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
	jobs := fs.Int("jobs", 2, "mutants run at once; a mutant whose tests include ./e2e always runs alone (its daemons' timing)")
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
	verdicts := runAll(ctx, selected, max(*jobs, 1), func(job, i int, m mutation.Mutant) (string, string) {
		t0 := time.Now()
		env := []string{storetest.TestDatabaseEnv + "=" + jobDatabase(job)}
		verdict, detail := runMutant(ctx, root, filepath.Join(tmp, fmt.Sprintf("%03d-%s", i+1, m.ID)), m, env, *timeout)
		return fmt.Sprintf("mutate: [%d/%d] %-40s %-8s %5.1fs %s\n", i+1, len(selected), m.ID, verdict, time.Since(t0).Seconds(), detail), verdict
	}, stdout)
	var bad []string
	for i, v := range verdicts {
		if v != "killed" {
			bad = append(bad, selected[i].ID+" ("+v+")")
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

// jobDatabase is the database that holds storetest's schemas for the
// mutants job runs (numbered from 0): one per job, so that two test
// binaries running at once never share one.
func jobDatabase(job int) string {
	return fmt.Sprintf("%s_job%d", storetest.TestDatabase, job+1)
}

// runMutant applies m in dir, a directory of this run's own, runs its
// tests with env added to the environment, and returns "killed",
// "SURVIVED" or "BROKEN" and a detail line.
func runMutant(ctx context.Context, root, dir string, m mutation.Mutant, env []string, timeout time.Duration) (string, string) {
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
		res, out, err := goTest(ctx, root, ovPath, k, env, timeout)
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

// goTest runs the named tests of one package under the overlay, with env
// added to the environment, and returns each top-level test's final action
// ("pass", "fail", "skip").
func goTest(ctx context.Context, root, overlay string, k mutation.Kill, env []string, timeout time.Duration) (map[string]string, []byte, error) {
	pattern := "^(" + strings.Join(k.Tests, "|") + ")$"
	args := []string{"test", "-overlay=" + overlay, "-count=1", "-json", "-timeout=" + timeout.String(), "-ldflags=-w", "-gcflags=-N -l", "-run", pattern}
	if len(k.Tests) == 1 {
		// One test to turn red: stop at its first failing subtest.
		args = append(args, "-failfast")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, k.Pkg)...)
	cmd.Dir = root
	cmd.Env = append(append(withoutFFCTLBin(os.Environ()), harness.MutationOverlayEnv+"="+overlay), env...)
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
