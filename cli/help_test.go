package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	ffcli "github.com/flowforge/flowforge/cli"
)

// ffNoDB runs ffctl for commands that never reach the database.
func ffNoDB(args ...string) result {
	var out, errOut bytes.Buffer
	code := ffcli.Run(context.Background(), append([]string{"ffctl"}, args...), nil, strings.NewReader(""), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// TestEveryCommandHasASummaryAndAnExample walks the whole command tree and
// reads each command's --help.
func TestEveryCommandHasASummaryAndAnExample(t *testing.T) {
	t.Parallel()
	app := ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	var walk func(path []string, cmds []*cli.Command)
	seen := 0
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			seen++
			t.Run(strings.Join(p, " "), func(t *testing.T) {
				if c.Usage == "" || strings.Contains(c.Usage, "\n") {
					t.Fatalf("summary %q: want one line", c.Usage)
				}
				r := ffNoDB(append(p, "--help")...)
				if r.code != 0 {
					t.Fatal(r)
				}
				for _, want := range []string{"ffctl " + strings.Join(p, " ") + " - " + c.Usage, "Example:\n", "ffctl " + strings.Join(p, " ")} {
					if !strings.Contains(r.stdout, want) {
						t.Fatalf("help lacks %q:\n%s", want, r.stdout)
					}
				}
			})
			walk(p, c.Subcommands)
		}
	}
	walk(nil, app.Commands)
	if seen < 25 {
		t.Fatalf("walked %d commands, expected the whole tree", seen)
	}
	r := ffNoDB("--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Example:") || !strings.Contains(r.stdout, "Exit codes: 0 success, 1 operation failed") {
		t.Fatalf("ffctl --help:\n%s", r)
	}
}

// TestHelpAfterAPositionalArgument walks the whole command tree and asks
// for help after a positional argument, with --help and with -h (issue 23:
// "ffctl run show ID --help" said "unknown command 'ID'"). Help wins
// wherever it is asked for: exit 0, the command's own usage on stdout,
// nothing on stderr. For a command with subcommands the argument stands
// where a subcommand name would, and its help lists them.
func TestHelpAfterAPositionalArgument(t *testing.T) {
	t.Parallel()
	app := ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	var walk func(path []string, cmds []*cli.Command)
	seen := 0
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			seen++
			for _, h := range []string{"--help", "-h"} {
				args := append(append([]string(nil), p...), "0b7c6d2e", h)
				t.Run(strings.Join(args, " "), func(t *testing.T) {
					r := ffNoDB(args...)
					want := "ffctl " + strings.Join(p, " ") + " - " + c.Usage
					if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, want) {
						t.Fatalf("want exit 0 and %q on stdout:\n%s", want, r)
					}
				})
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, app.Commands)
	if seen < 25 {
		t.Fatalf("walked %d commands, expected the whole tree", seen)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	// A test binary has no linker stamp and no VCS stamp.
	if r := ffNoDB("version"); r.code != 0 || !strings.HasPrefix(r.stdout, "ffctl dev\ncommit: unknown") || !strings.Contains(r.stdout, "\nschema: runs on versions ") {
		t.Fatal(r)
	}
	r := ffNoDB("version", "-o", "json")
	var v map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("version -o json: %v\n%s", err, r)
	}
	schema, _ := v["schema"].(map[string]any)
	if v["version"] != "dev" || v["commit"] != nil || v["build_date"] != nil || schema["min"] == nil || schema["latest"] == nil {
		t.Fatalf("version -o json: %s", r.stdout)
	}
	for _, k := range []string{"commit", "commit_time", "modified", "build_date", "go_version"} {
		if _, ok := v[k]; !ok {
			t.Errorf("version -o json lacks %q (absent facts are null): %s", k, r.stdout)
		}
	}
}

// TestVersionOfABuiltBinary builds ffctl the way `make build` does and
// checks that `ffctl version` reports the stamped version and build date
// and the commit it was built from (issue 11: it printed "dev").
func TestVersionOfABuiltBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds ffctl")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "ffctl")
	// The flags `make build` passes (a git worktree, such as this one may
	// be, gets no VCS stamp from the toolchain: the -X Commit covers it).
	ld := "-X github.com/flowforge/flowforge/cli.Version=v9.9.9-test -X github.com/flowforge/flowforge/cli.BuildDate=2026-12-01T10:00:00Z" +
		" -X github.com/flowforge/flowforge/cli.Commit=" + strings.TrimSpace(string(head))
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", ld, "-o", bin, "./ffctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Version   string  `json:"version"`
		Commit    *string `json:"commit"`
		BuildDate *string `json:"build_date"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.Version != "v9.9.9-test" || v.BuildDate == nil || *v.BuildDate != "2026-12-01T10:00:00Z" ||
		v.Commit == nil || *v.Commit != strings.TrimSpace(string(head)) {
		t.Fatalf("version -o json of a stamped build:\n%s", out)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(text), "ffctl v9.9.9-test\ncommit: "+*v.Commit) {
		t.Fatalf("version: %v\n%s", err, text)
	}
	if flag, err := exec.Command(bin, "--version").Output(); err != nil || !strings.Contains(string(flag), "v9.9.9-test") {
		t.Fatalf("--version: %v\n%s", err, flag)
	}
}

func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		t.Run(sh, func(t *testing.T) {
			r := ffNoDB("completion", sh)
			if r.code != 0 || len(r.stdout) < 100 || !strings.Contains(r.stdout, "ffctl") {
				t.Fatalf("completion %s: %s", sh, r)
			}
			if sh != "fish" && !strings.Contains(r.stdout, "--generate-bash-completion") {
				t.Fatalf("%s script does not ask ffctl for candidates:\n%s", sh, r.stdout)
			}
			if sh == "fish" && !strings.Contains(r.stdout, "complete -c ffctl") {
				t.Fatalf("fish script:\n%s", r.stdout)
			}
		})
	}
	expect(t, ffNoDB("completion"), 2, "one shell")
}

// TestCompletionCandidates checks what the scripts ask for: subcommands,
// and flags after a "-", also once a positional argument was typed.
func TestCompletionCandidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--generate-bash-completion"}, []string{"run", "dead", "workflow", "completion"}},
		{[]string{"run", "--generate-bash-completion"}, []string{"trigger", "list", "show", "wait", "cancel"}},
		{[]string{"run", "trigger", "nightly", "--w", "--generate-bash-completion"}, []string{"--wait"}},
		{[]string{"dead", "requeue", "-", "--generate-bash-completion"}, []string{"--reason", "--all", "--yes"}},
		{[]string{"event", "--generate-bash-completion"}, []string{"send", "list"}},
		{[]string{"event", "send", "order.approved", "--e", "--generate-bash-completion"}, []string{"--event-lookback"}},
	} {
		r := ffNoDB(tc.args...)
		if r.code != 0 {
			t.Fatalf("%v: %s", tc.args, r)
		}
		for _, w := range tc.want {
			if !strings.Contains("\n"+r.stdout, "\n"+w+"\n") {
				t.Fatalf("%v: candidates lack %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

// TestBashCompletionScriptRuns loads the bash script into a real bash and
// completes "ffctl ru" with a stub ffctl that answers like the real one.
func TestBashCompletionScriptRuns(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	script := dir + "/ffctl.bash"
	if err := os.WriteFile(script, []byte(ffNoDB("completion", "bash").stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	candidates := ffNoDB("--generate-bash-completion").stdout
	stub := "ffctl() { printf '%s' '" + candidates + "'; }\n"
	cmd := exec.Command(bash, "--noprofile", "--norc", "-c", stub+"source "+script+"\nCOMP_WORDS=(ffctl ru); COMP_CWORD=1; _ffctl_complete; printf '%s\\n' \"${COMPREPLY[@]}\"")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "run" {
		t.Fatalf("completing \"ffctl ru\" gave %q, want run", out)
	}
}
