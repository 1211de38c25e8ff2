// Package cli is ffctl's command line: one file per noun (migrate, daemon,
// workflow, run, task, dead, outbox, tui, version), urfave/cli/v2 commands,
// kebab-case flags each with one FLOWFORGE_* environment variable
// (precedence: flag > environment > default).
//
// A program with its own handlers builds its own ffctl in one line:
//
//	func main() { cli.Main(registry) }
//
// Exit codes: 0 success (a signal-driven graceful stop counts), 1 a failed
// operation (not found, refused, a run that ended other than SUCCEEDED, a
// timeout), 2 usage or bad input.
package cli
