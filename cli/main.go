package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFailed   = 1
	ExitBadUsage = 2
)

// Version is the ffctl version string; release builds set it with
// -ldflags "-X github.com/flowforge/flowforge/cli.Version=v1.2.3".
var Version = "dev"

// ExitError carries an exit code with its message.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// usageError is bad input: exit 2.
func usageError(format string, args ...any) error {
	return &ExitError{Code: ExitBadUsage, Err: fmt.Errorf(format, args...)}
}

// failure is a failed operation: exit 1.
func failure(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: ExitFailed, Err: err}
}

// exitCode maps an error to ffctl's exit codes.
func exitCode(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, core.ErrBadParams), errors.Is(err, core.ErrBadWorkflow):
		return ExitBadUsage
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
		return ExitFailed
	}
	return ExitFailed
}

// Main runs ffctl with os.Args and the handlers of reg (nil means only the
// built-ins) and exits the process with ffctl's exit code. It is the whole
// body of a custom binary's main.
func Main(reg *core.Registry) {
	os.Exit(Run(context.Background(), os.Args, reg, os.Stdin, os.Stdout, os.Stderr))
}

// Run runs ffctl with args (args[0] is the program name) and returns the
// exit code. It never calls os.Exit.
func Run(ctx context.Context, args []string, reg *core.Registry, stdin io.Reader, stdout, stderr io.Writer) int {
	if reg == nil {
		reg = core.NewRegistry()
	}
	env := &Env{Registry: reg, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	app := NewApp(env)
	err := app.RunContext(ctx, interspersed(app, args))
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "ffctl:") {
			msg = "ffctl: " + msg
		}
		fmt.Fprintln(stderr, msg)
	}
	return exitCode(err)
}

// Env is what commands share: the handler registry and the process's
// standard streams.
type Env struct {
	Registry *core.Registry
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
}

// NewApp builds the urfave/cli application. It never calls os.Exit: errors
// are returned from RunContext.
func NewApp(env *Env) *cli.App {
	app := &cli.App{
		Name:                 "ffctl",
		Usage:                "run and operate FlowForge, a durable workflow engine on PostgreSQL and RabbitMQ",
		Version:              Version,
		Writer:               env.Stdout,
		ErrWriter:            env.Stderr,
		Reader:               env.Stdin,
		EnableBashCompletion: true,
		Suggest:              true,
		Flags:                globalFlags(),
		ExitErrHandler:       func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return usageError("%v (see --help)", err)
		},
		Commands: []*cli.Command{
			migrateCommand(env),
			daemonCommand(env),
			workflowCommand(env),
			runCommand(env),
			taskCommand(env),
			deadCommand(env),
			outboxCommand(env),
			versionCommand(env),
		},
	}
	for _, c := range app.Commands {
		setUsageHandler(c)
	}
	return app
}

func setUsageHandler(c *cli.Command) {
	c.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return usageError("%s: %v (see ffctl %s --help)", c.Name, err, c.Name)
	}
	for _, s := range c.Subcommands {
		setUsageHandler(s)
	}
}
