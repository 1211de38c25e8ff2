package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Whole-number flags are read in decimal only. urfave/cli hands a flag's
// command-line value to Go's flag package, which reads integers as Go
// literals: `--limit 010` was 8 (octal), `--limit 0x10` 16, `--limit 1_0`
// 10, each accepted without a word, and its environment variables are read
// the same way (IntFlag.Base 0). An operator who writes 010 means ten, or
// made a typo: either way a silent 8 is wrong.

// decimalIntFlags makes every whole-number flag of app and its commands
// read its environment variable in decimal (IntFlag.Base 10).
func decimalIntFlags(app *cli.App) {
	var walk func(flags []cli.Flag, cmds []*cli.Command)
	walk = func(flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			if i, ok := f.(*cli.IntFlag); ok && i.Base == 0 {
				i.Base = 10
			}
		}
		for _, c := range cmds {
			walk(c.Flags, c.Subcommands)
		}
	}
	walk(app.Flags, app.Commands)
}

// nonDecimalInt returns the first whole-number flag of args (the leaf
// command's or a global one) whose value is not written in decimal, as
// "--name value", or "" when there is none: a leading zero before another
// digit, a base prefix (0x, 0o, 0b) or a digit separator (_), all of which
// Go's flag package would read.
func nonDecimalInt(app *cli.App, args []string) string {
	w, _ := walkToLeaf(app, args)
	flags := append(append([]cli.Flag{}, w.flags...), app.Flags...)
	for j := 1; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, value, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := flagNamed(flags, name)
		if f == nil {
			continue
		}
		if _, ok := f.(*cli.IntFlag); !ok {
			if _, isBool := f.(*cli.BoolFlag); !isBool && !inline {
				j++ // its value is not a flag
			}
			continue
		}
		if !inline {
			if j+1 >= len(args) {
				return ""
			}
			j++
			value = args[j]
		}
		if !decimal(value) {
			return "--" + name + " " + value
		}
	}
	return ""
}

// flagNamed returns the flag of flags that has name, or nil.
func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// decimal reports whether v, as Go's flag package would read it, means
// the decimal number it looks like: no digit separator, and no leading
// zero before anything (0 itself is fine). What is not a number at all is
// left to the parser's own error.
func decimal(v string) bool {
	d := strings.TrimLeft(v, "+-")
	return !strings.Contains(d, "_") && !(len(d) > 1 && d[0] == '0')
}
