package cli

import (
	"errors"
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

// TestAFlagsBadEnvironmentValueSaysWhatItMustBe: urfave/cli's refusal of
// a flag's environment variable names Go's parser ("strconv.ParseInt:
// parsing ...: invalid syntax"); ffctl says the variable, the value, its
// flag and what the value must be.
func TestAFlagsBadEnvironmentValueSaysWhatItMustBe(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`could not parse "0x10" as int value from environment variable "FLOWFORGE_CONCURRENCY" for flag concurrency: strconv.ParseInt: parsing "0x10": invalid syntax`,
			`FLOWFORGE_CONCURRENCY="0x10" (for --concurrency): want a whole number in plain decimal`},
		{`could not parse "soon" as duration value from environment variable "FLOWFORGE_LEASE" for flag lease: time: invalid duration "soon"`,
			`FLOWFORGE_LEASE="soon" (for --lease): want a duration such as 30s or 5m`},
		{`flag provided but not defined: -limt`, `flag provided but not defined: --limt`},
	} {
		if got := flagErrorText(errors.New(c.in)); got != c.want {
			t.Errorf("flagErrorText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
