package cli

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/daemon/handlers"
)

// shellSupervisorCommandName names the hidden command the shell handler
// starts each command under (handlers.SuperviseShell).
const shellSupervisorCommandName = "__shell-supervisor"

// shellSupervisor is the shell handler's supervisor argv prefix
// (handlers.ShellOptions.Supervisor): this very executable, through
// /proc/self/exe so that a binary replaced or removed on disk since the
// worker started still supervises with its own code. Every binary built
// with Main or Run has the hidden command.
func shellSupervisor() []string { return []string{"/proc/self/exe", shellSupervisorCommandName} }

// shellSupervisorCommand is `ffctl __shell-supervisor -- WORKER_PID PATH
// ARGV...`, run by the worker's shell handler only, never by a person. Its
// process ends inside the action with the command's own status (its exit
// code, or the same signal), so it calls os.Exit itself: an exit code
// returned through Run would add a message to the command's stderr.
func shellSupervisorCommand(*Env) *cli.Command {
	return &cli.Command{
		Name:  shellSupervisorCommandName,
		Usage: "(internal) run one shell task's command for the worker, killing its process group when the worker dies",
		UsageText: "ffctl " + shellSupervisorCommandName + " -- WORKER_PID PATH ARGV0 [ARG...]\n\n" +
			"Started by a worker's shell handler for each command, never by hand.\n\n" +
			"Example:\n  ffctl " + shellSupervisorCommandName + " -- 4242 /bin/sh sh -c 'make report'",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			if a := c.Args().First(); a == "--help" || a == "-h" {
				return cli.ShowSubcommandHelp(c)
			}
			os.Exit(handlers.SuperviseShell(c.Args().Slice()))
			return nil
		},
	}
}
