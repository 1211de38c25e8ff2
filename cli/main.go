package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFailed   = 1
	ExitBadUsage = 2
)

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
	case errors.Is(err, store.ErrWorkflowPaused):
		return ExitPaused
	case errors.As(err, &ee):
		return ee.Code
	case isLibraryExit(err):
		// urfave/cli's own exits ("No help topic for 'x'") are usage errors.
		return ExitBadUsage
	case errors.Is(err, core.ErrBadParams), errors.Is(err, core.ErrBadWorkflow), errors.Is(err, schedule.ErrBadSchedule):
		return ExitBadUsage
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
		return ExitFailed
	}
	return ExitFailed
}

// Main runs ffctl with os.Args and the handlers of reg (nil means only the
// built-ins) and exits the process with ffctl's exit code. It is the whole
// body of a custom binary's main.
//
// Main installs ffctl's one handler of SIGINT and SIGTERM: the first one
// cancels the context every command runs under, with an *InterruptError
// as its cause (a wait then says the run continues and exits 128+signal,
// 130 for ctrl-C), and then hands the signals back, so a second one ends a
// command that has not stopped, except a daemon, which keeps its own
// two-stage stop (its second signal aborts in-flight tasks), and the bulk
// trigger, which asks for the second one (secondInterrupt: it abandons the
// batch in flight).
func Main(reg *core.Registry) {
	ctx, stop := interruptContext(context.Background())
	code := Run(ctx, os.Args, reg, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// InterruptError is the cause of the context of a command cut short by a
// signal (see Main).
type InterruptError struct {
	Signal os.Signal
}

func (e *InterruptError) Error() string { return "interrupted by " + e.Signal.String() }

// ExitCode is 128 plus the signal's number (130 for SIGINT), the shell's
// convention for a process ended by a signal.
func (e *InterruptError) ExitCode() int {
	if n, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return ExitFailed
}

// interruptContext returns parent's child that the first SIGINT or
// SIGTERM cancels with an *InterruptError cause, and the function that
// releases the signals (call it once the command has returned). After the
// first signal it hands the signals back (their default action, unless a
// daemon has registered for them: see supervisor.SignalStop), except to a
// command that asked for the second one (secondInterrupt): the watcher of
// the second is registered before the first hands the signals back, so no
// signal finds their default action in between, and is released in turn
// once the second has come. A signal that arrives before the second
// watcher is registered (microseconds after the first, as when one signal
// reaches the process twice, sent to it and to its group) counts as part
// of the first. The goroutines are the standard
// library's: signal.NotifyContext's, one per signal so that the cause can
// name it, and context.AfterFunc's.
func interruptContext(parent context.Context) (context.Context, func()) {
	// watch calls on at the next SIGINT or SIGTERM, with the signal, and
	// then stops listening; parent's end stops it too, without on. It
	// returns the function that stops listening at once.
	watch := func(on func(*InterruptError)) func() {
		term, stopTerm := signal.NotifyContext(parent, syscall.SIGTERM)
		intr, stopIntr := signal.NotifyContext(term, os.Interrupt)
		handBack := func() {
			stopIntr()
			stopTerm()
		}
		unwatch := context.AfterFunc(intr, func() {
			switch {
			case parent.Err() != nil: // not a signal: the command's context has ended with parent
			case term.Err() != nil:
				on(&InterruptError{Signal: syscall.SIGTERM})
			default:
				on(&InterruptError{Signal: os.Interrupt})
			}
			handBack()
		})
		return func() {
			unwatch()
			handBack()
		}
	}
	ctx, cancel := context.WithCancelCause(parent)
	second, cancelSecond := context.WithCancelCause(context.WithoutCancel(parent))
	in := &interrupts{second: second}
	stopFirst := watch(func(ie *InterruptError) {
		in.mu.Lock()
		if in.asked && !in.released {
			// Before ctx ends, so that a command that sees it end
			// can count on the second watcher.
			in.stopSecond = watch(func(ie *InterruptError) { cancelSecond(ie) })
		}
		in.mu.Unlock()
		cancel(ie)
	})
	return context.WithValue(ctx, interruptsKey{}, in), func() {
		in.mu.Lock()
		in.released = true
		stopSecond := in.stopSecond
		in.mu.Unlock()
		stopFirst()
		if stopSecond != nil {
			stopSecond()
		}
		cancel(nil)
		cancelSecond(nil)
	}
}

// interrupts is what interruptContext keeps for a command that asks for
// the second signal (see secondInterrupt).
type interrupts struct {
	// second is cancelled by the second signal, once asked for.
	second context.Context

	mu sync.Mutex
	// asked: a command wants the second signal; released: the command
	// has returned; stopSecond stops the second signal's watcher (nil
	// until the first signal arms it).
	asked, released bool
	stopSecond      func()
}

// interruptsKey is the context key of a command's *interrupts.
type interruptsKey struct{}

// secondInterrupt returns the context that the second SIGINT or SIGTERM
// cancels, with an *InterruptError cause, for a command that goes on
// after the first one (which cancels ctx, the command's context) and must
// stop at the second: the bulk trigger, whose batch in flight ends first.
// Asked before the first signal, it keeps the signals from their default
// action until the second (a shell's background job, which starts with
// SIGINT ignored, then sees it too). Asked after the first, or of a
// context interruptContext did not make (a test's Run), it returns a
// context that no signal cancels.
func secondInterrupt(ctx context.Context) context.Context {
	in, ok := ctx.Value(interruptsKey{}).(*interrupts)
	if !ok {
		return context.WithoutCancel(ctx)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.asked = true
	return in.second
}

// interrupted returns the signal that cut ctx short, or nil.
func interrupted(ctx context.Context) *InterruptError {
	var ie *InterruptError
	if errors.As(context.Cause(ctx), &ie) {
		return ie
	}
	return nil
}

// Run runs ffctl with args (args[0] is the program name) and returns the
// exit code. It never calls os.Exit.
func Run(ctx context.Context, args []string, reg *core.Registry, stdin io.Reader, stdout, stderr io.Writer) int {
	return (&Env{Registry: reg, Stdin: stdin, Stdout: stdout, Stderr: stderr}).run(ctx, args)
}

// run runs ffctl in env and returns the exit code.
func (env *Env) run(ctx context.Context, args []string) int {
	if env.Registry == nil {
		env.Registry = core.NewRegistry()
	}
	env.args = args
	parseMu.Lock()
	env.parsed = sync.OnceFunc(parseMu.Unlock)
	defer env.parsed()
	app := NewApp(env)
	var err error
	if bad := invalidUTF8Arg(args); bad != "" {
		// Checked before parsing: urfave/cli re-encodes the values of
		// aliased slice flags (--param/-p) as JSON, which silently turns
		// invalid bytes into U+FFFD, so two different values would be
		// stored as one.
		err = usageError("argument %q is not valid UTF-8", bad)
	} else if bad := nonDecimalInt(app, args); bad != "" {
		err = usageError("%s: write whole numbers in plain decimal, without a leading zero, 0x or _ (read as octal, hexadecimal or with separators otherwise)", bad)
	} else {
		err = app.RunContext(ctx, interspersed(app, args))
	}
	if err != nil {
		// One line per error: drivers put newlines in theirs.
		msg := strings.Join(strings.Fields(strings.ReplaceAll(settingSource(env.args, err), "\n", "; ")), " ")
		if isLibraryExit(err) {
			if rest, ok := strings.CutPrefix(msg, "No help topic for "); ok {
				msg = "unknown command " + rest + " (see --help)"
			}
		}
		if !strings.HasPrefix(msg, "ffctl:") {
			msg = "ffctl: " + msg
		}
		fmt.Fprintln(env.Stderr, msg)
		if ie := interrupted(ctx); ie != nil && exitCode(err) == ExitFailed {
			// A command cut short by a signal exits as the shell expects.
			return ie.ExitCode()
		}
	}
	return exitCode(err)
}

// settingSource returns err's message, in which a *daemon.SettingError
// that err wraps names the environment variable its value came from: when
// the flag is not on the command line args (--flag, --flag=...) and its
// variable (FLOWFORGE_ and the flag's name in upper case, dashes as
// underscores: every daemon flag's) is set, the operator wrote the
// variable, not the flag.
func settingSource(args []string, err error) string {
	msg := err.Error()
	var se *daemon.SettingError
	if !errors.As(err, &se) || se.Flag == "" || se.Env != "" {
		return msg
	}
	for _, a := range args {
		if a == "--"+se.Flag || strings.HasPrefix(a, "--"+se.Flag+"=") || a == "-"+se.Flag || strings.HasPrefix(a, "-"+se.Flag+"=") {
			return msg
		}
	}
	name := "FLOWFORGE_" + strings.ToUpper(strings.ReplaceAll(se.Flag, "-", "_"))
	// The process's environment, not env.env: it is what urfave/cli
	// reads the flags' variables from.
	if os.Getenv(name) == "" {
		return msg
	}
	fromFlag := se.Error()
	fromEnv := *se
	fromEnv.Env = name
	// The wrapping errors' messages were made with se's: replace it.
	return strings.Replace(msg, fromFlag, fromEnv.Error(), 1)
}

// invalidUTF8Arg returns the first argument that is not valid UTF-8 (its
// valid prefix for the message), or "".
func invalidUTF8Arg(args []string) string {
	for _, a := range args[1:] {
		if !utf8.ValidString(a) {
			return strings.ToValidUTF8(a, `\ufffd`)
		}
	}
	return ""
}

// isLibraryExit reports whether err is an exit error made by urfave/cli
// itself rather than by ffctl.
func isLibraryExit(err error) bool {
	var ee *ExitError
	var ec cli.ExitCoder
	return !errors.As(err, &ee) && errors.As(err, &ec)
}

// Env is what commands share: the handler registry and the process's
// standard streams.
type Env struct {
	Registry *core.Registry
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer

	// terminal and getenv replace terminal detection and os.Getenv in
	// tests; nil means the real ones.
	terminal func(f any) bool
	getenv   func(string) string
	// args is the command line being run (for shell completion).
	args []string
	// parsed ends this run's hold on parseMu; nil outside Env.run.
	parsed func()
}

// parseMu serialises command-line parsing across concurrent Runs in one
// process: urfave/cli v2 writes to its package-level HelpFlag and
// VersionFlag while it parses. It is held from the start of a Run until its
// command's action begins (see releaseParse), so actions run in parallel.
var parseMu sync.Mutex

// releaseParse wraps the action of c and of its descendants so that it
// first lets other Runs parse. The completion command keeps the lock: it
// reads the library's global flags.
func releaseParse(env *Env, c *cli.Command) {
	if a := c.Action; a != nil && c.Name != "completion" {
		c.Action = func(ctx *cli.Context) error {
			if env.parsed != nil {
				env.parsed()
			}
			return a(ctx)
		}
	}
	for _, s := range c.Subcommands {
		releaseParse(env, s)
	}
}

// isTTY reports whether the stream f (one of Stdin, Stdout, Stderr) is an
// interactive terminal.
func (env *Env) isTTY(f any) bool {
	if env.terminal != nil {
		return env.terminal(f)
	}
	return isTerminal(f)
}

func (env *Env) env(key string) string {
	v, _ := env.lookupEnv(key)
	return v
}

// lookupEnv is env with whether the variable is set at all (an empty
// value set is not an unset variable).
func (env *Env) lookupEnv(key string) (string, bool) {
	if env.getenv != nil {
		v := env.getenv(key)
		return v, v != ""
	}
	return os.LookupEnv(key)
}

// interactive reports whether a person is at the keyboard: standard input
// and standard error are both terminals, so a prompt can be seen and
// answered.
func (env *Env) interactive() bool { return env.isTTY(env.Stdin) && env.isTTY(env.Stderr) }

// NewApp builds the urfave/cli application. It never calls os.Exit: errors
// are returned from RunContext.
func NewApp(env *Env) *cli.App {
	app := &cli.App{
		Name:                 "ffctl",
		Usage:                "run and operate FlowForge, a durable workflow engine on PostgreSQL and RabbitMQ",
		UsageText:            "ffctl [global options] command [command options] [arguments...]\n\nExample:\n  ffctl run trigger nightly-report --param date=2026-11-30 --wait --timeout 10m\n\nExit codes: 0 success, 1 operation failed (not found, refused, run ended other than SUCCEEDED, timeout), 2 usage or bad input, 3 a trigger dropped by a workflow paused with --mode drop, 130 a wait stopped by ctrl-C (the run goes on).",
		Version:              readBuild().Version,
		Writer:               env.Stdout,
		ErrWriter:            env.Stderr,
		Reader:               env.Stdin,
		EnableBashCompletion: true,
		Suggest:              true,
		Flags:                globalFlags(),
		ExitErrHandler:       func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return usageError("%s (see --help)", flagErrorText(err))
		},
		Commands: []*cli.Command{
			migrateCommand(env),
			daemonCommand(env),
			workflowCommand(env),
			runCommand(env),
			eventCommand(env),
			eventsCommand(env),
			limitsCommand(env),
			scheduleCommand(env),
			taskCommand(env),
			deadCommand(env),
			tokenCommand(env),
			outboxCommand(env),
			brokerCommand(env),
			tuiCommand(env),
			versionCommand(env),
			statusCommand(env),
			doctorCommand(env),
			completionCommand(env),
			shellSupervisorCommand(env),
		},
	}
	app.BashComplete = env.complete(nil)
	for _, c := range app.Commands {
		setUsageHandler(c, "")
		setCompletion(env, c)
		releaseParse(env, c)
	}
	decimalIntFlags(app)
	return app
}

// setUsageHandler gives c and its descendants a usage-error handler that
// names the command, where they have none of their own.
func setUsageHandler(c *cli.Command, parent string) {
	path := strings.TrimSpace(parent + " " + c.Name)
	if c.OnUsageError == nil {
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return usageError("%s: %s (see ffctl %s --help)", path, flagErrorText(err), path)
		}
	}
	for _, s := range c.Subcommands {
		setUsageHandler(s, path)
	}
}
