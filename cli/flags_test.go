package cli_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	ffcli "github.com/flowforge/flowforge/cli"
)

// TestEveryReasonAndYesFlagIsTheSharedOne: every command's --reason and
// --yes come from the one builder of each (reasonFlag, yesFlag): --reason
// a string flag without alias whose usage says why it is asked, --yes a
// bool flag with -y (run delete's --yes once had no -y, dead requeue's
// had). run delete takes -y for --yes.
func TestEveryReasonAndYesFlagIsTheSharedOne(t *testing.T) {
	t.Parallel()
	app := ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	seen := map[string]int{}
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.Join(append(slices.Clone(path), c.Name), " ")
			for _, f := range c.Flags {
				switch f.Names()[0] {
				case "reason":
					seen["reason"]++
					if s, ok := f.(*cli.StringFlag); !ok || len(s.Aliases) != 0 || !strings.HasPrefix(s.Usage, "why") {
						t.Errorf("%s: --reason (%T, names %v, usage %q) is not reasonFlag's", p, f, f.Names(), flagUsage(f))
					}
				case "yes":
					seen["yes"]++
					if b, ok := f.(*cli.BoolFlag); !ok || !slices.Equal(b.Aliases, []string{"y"}) {
						t.Errorf("%s: --yes (%T, names %v) is not yesFlag's (--yes, -y)", p, f, f.Names())
					}
				}
			}
			walk(append(slices.Clone(path), c.Name), c.Subcommands)
		}
	}
	walk(nil, app.Commands)
	if seen["reason"] < 10 || seen["yes"] < 2 {
		t.Fatalf("found %d --reason and %d --yes flags; expected the whole tree's", seen["reason"], seen["yes"])
	}
	r := ffNoDB("run", "delete", "0b7c6d2e", "-y")
	if r.code != 2 || !strings.Contains(r.stderr, "--yes only applies with --older-than") {
		t.Fatalf("run delete ID -y: %s", r)
	}
}

// flagUsage is f's usage text, when it has one.
func flagUsage(f cli.Flag) string {
	if d, ok := f.(cli.DocGenerationFlag); ok {
		return d.GetUsage()
	}
	return ""
}
