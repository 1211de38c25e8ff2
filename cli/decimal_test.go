package cli

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestEveryWholeNumberFlagReadsItsEnvironmentInDecimal: every IntFlag of
// the app NewApp builds reads its environment variable in base 10
// (decimalIntFlags), so FLOWFORGE_CONCURRENCY=010 is ten, not eight (octal, as
// Go's literal syntax, base 0, reads it).
func TestEveryWholeNumberFlagReadsItsEnvironmentInDecimal(t *testing.T) {
	app := NewApp(&Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	var ints []*cli.IntFlag
	var walk func(flags []cli.Flag, cmds []*cli.Command)
	walk = func(flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			if i, ok := f.(*cli.IntFlag); ok {
				ints = append(ints, i)
			}
		}
		for _, c := range cmds {
			walk(c.Flags, c.Subcommands)
		}
	}
	walk(app.Flags, app.Commands)
	var concurrency *cli.IntFlag
	for _, f := range ints {
		if f.Base != 10 {
			t.Errorf("--%s reads its environment in base %d, want 10", f.Name, f.Base)
		}
		if f.Name == "concurrency" && len(f.EnvVars) > 0 {
			concurrency = f
		}
	}
	if len(ints) < 10 || concurrency == nil {
		t.Fatalf("found %d whole-number flags and concurrency %v: is the walk broken?", len(ints), concurrency)
	}
	t.Setenv(concurrency.EnvVars[0], "010")
	if err := concurrency.Apply(flag.NewFlagSet("t", flag.ContinueOnError)); err != nil || concurrency.Value != 10 {
		t.Fatalf("%s=010 gave %d (%v), want 10", concurrency.EnvVars[0], concurrency.Value, err)
	}
}
