// Package cli is ffctl's command line: one file per noun (migrate, daemon,
// workflow, run, task, dead, outbox, tui, version; ids.go and age.go parse
// the id and age arguments they share), urfave/cli/v2 commands,
// kebab-case flags each with one FLOWFORGE_* environment variable
// (precedence: flag > environment > default).
//
// A program with its own handlers builds its own ffctl in one line:
//
//	func main() { cli.Main(registry) }
//
// Exit codes: 0 success (a signal-driven graceful stop counts), 1 a failed
// operation (not found, refused, a run that ended other than SUCCEEDED, a
// timeout), 2 usage or bad input (also an ambiguous id prefix, or a run id
// where a task id is wanted), 128+N a command other than a daemon cut short
// by signal N (130: ctrl-C during a wait, which leaves the run running).
//
// Signals: Main installs the one SIGINT/SIGTERM handler (see Main); every
// command runs under the context it cancels. A daemon registers for the
// signals too, for its second stage (supervisor.SignalStop, see
// runDaemon). The package starts no goroutine of its own: the signal
// handlers' are the standard library's and package supervisor's.
//
// Daemons: `ffctl daemon ROLE` is flag wiring. Each role has its own flags
// and the common ones (all: every role's); the flags map to a
// supervisor.Config, whose Validate is the one place their bounds are
// checked (a bad value exits 2 with its message), and the process is
// supervisor.Run's.
//
// Ids: every run or task id argument takes the whole UUID or a unique
// prefix (see parseID and resolveID; the look-up is store.ResolveID).
package cli
