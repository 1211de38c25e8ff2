package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed lets flags follow positional arguments ("ffctl run trigger
// NAME --wait"), which urfave/cli v2 does not parse on its own: for the leaf
// command named by args it moves every flag (with its value) ahead of the
// positional arguments. Global flags written after a command ("ffctl daemon
// all --queue q") are moved ahead of the command, where urfave/cli looks for
// them. "--" ends flag handling. A help flag (-h, --help) among the flags
// drops the positional arguments: urfave/cli would read the first of them as
// the name of a command to describe ("unknown command 'ID'"), and whoever
// asks for help wants the help of the command they named, whatever follows.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		// Shell completion needs its flag last and no "--": leave it be.
		return args
	}
	w, ok := walkToLeaf(app, args)
	if !ok {
		// A value-taking flag was last, without its value: the parser
		// reports it.
		return args
	}
	globals := w.globals
	var fl, pos []string
	for j := w.next; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			pos = append(pos, args[j+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			n := 1
			if !isBoolFlag(w.flags, a) && !strings.Contains(a, "=") && j+1 < len(args) {
				n = 2
			}
			if isGlobalOnly(app, w.flags, a) {
				globals = append(globals, args[j:j+n]...)
			} else {
				fl = append(fl, args[j:j+n]...)
			}
			j += n - 1
			continue
		}
		pos = append(pos, a)
	}
	if asksForHelp(w.flags, fl) {
		pos = nil
	}
	out := append([]string{args[0]}, globals...)
	out = append(out, w.walked...)
	out = append(out, fl...)
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

// leafWalk is where walkToLeaf stopped.
type leafWalk struct {
	next    int        // index in args of the first argument after the command names
	flags   []cli.Flag // the flags of the command reached
	globals []string   // global flags found after a command name
	walked  []string   // args[1:next] without the hoisted globals
}

// walkToLeaf walks the global flags and command names of args to the leaf
// command (or the last command args name). ok is false when a value-taking
// flag was last, without its value.
func walkToLeaf(app *cli.App, args []string) (w leafWalk, ok bool) {
	cmds := app.Commands
	w.flags = app.Flags
	i := 1
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			n := 1
			if !isBoolFlag(w.flags, a) && !strings.Contains(a, "=") {
				n = 2
			}
			if i+n > len(args) {
				return w, false
			}
			if len(w.walked) > 0 && isGlobalOnly(app, w.flags, a) {
				w.globals = append(w.globals, args[i:i+n]...)
			} else {
				w.walked = append(w.walked, args[i:i+n]...)
			}
			i += n
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
		w.walked = append(w.walked, a)
		i++
		w.flags = next.Flags
		cmds = next.Subcommands
		if len(cmds) == 0 {
			break
		}
	}
	w.next = i
	return w, i <= len(args)
}

// asksForHelp reports whether the flags moved ahead of the positional
// arguments (fl, flags with their values) hold -h or --help, and the command
// reached (whose flags are cmdFlags) does not define a flag of that name
// itself.
func asksForHelp(cmdFlags []cli.Flag, fl []string) bool {
	for j := 0; j < len(fl); j++ {
		a := fl[j]
		if (a == "-h" || a == "--help") && !hasFlag(cmdFlags, strings.TrimLeft(a, "-")) {
			return true
		}
		if !isBoolFlag(cmdFlags, a) && !strings.Contains(a, "=") {
			j++ // a value-taking flag: skip its value
		}
	}
	return false
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

// isGlobalOnly reports whether arg names one of the app's global flags that
// the current command does not define itself.
func isGlobalOnly(app *cli.App, cmdFlags []cli.Flag, arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	if hasFlag(cmdFlags, name) {
		return false
	}
	return hasFlag(app.Flags, name)
}

func hasFlag(flags []cli.Flag, name string) bool {
	return flagNamed(flags, name) != nil
}
