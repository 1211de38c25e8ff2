package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed lets flags follow positional arguments ("ffctl run trigger
// NAME --wait"), which urfave/cli v2 does not parse on its own: for the leaf
// command named by args it moves every flag (with its value) ahead of the
// positional arguments. "--" ends flag handling.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		// Shell completion needs its flag last and no "--": leave it be.
		return args
	}
	cmds := app.Commands
	flags := app.Flags
	i := 1
	// Walk global flags and command names to the leaf command.
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if !isBoolFlag(flags, a) && !strings.Contains(a, "=") {
				i++
			}
			i++
			continue
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		i++
		flags = next.Flags
		cmds = next.Subcommands
		if len(cmds) == 0 {
			break
		}
	}
	if i > len(args) {
		// A value-taking flag was last, without its value: the parser
		// reports it.
		return args
	}
	head := append([]string(nil), args[:i]...)
	var fl, pos []string
	for j := i; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			pos = append(pos, args[j+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			fl = append(fl, a)
			if !isBoolFlag(flags, a) && !strings.Contains(a, "=") && j+1 < len(args) {
				fl = append(fl, args[j+1])
				j++
			}
			continue
		}
		pos = append(pos, a)
	}
	out := append(head, fl...)
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

func isBoolFlag(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	// The command's own flags first: `run trigger --version N` takes a value
	// even though the global --version does not.
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, ok := f.(*cli.BoolFlag)
				return ok
			}
		}
	}
	return name == "h" || name == "help" || name == "v" || name == "version" || name == "generate-bash-completion"
}
